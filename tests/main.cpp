// The doctest runner for sqrtdk-tests. Each TEST_CASE is also registered with CTest (doctest_discover_tests).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
