// The whole C++ API in one include: Model, Session, generation and sampling, the profiler, errors, ISA choice,
// the .sqdk format, Hugging Face and GGUF conversion, tokenizers and chat templates. (The C API is <sqrtdk/sqrtdk.h>.)
#pragma once

#include <sqrtdk/batch.h>
#include <sqrtdk/chat.h>
#include <sqrtdk/convert.h>
#include <sqrtdk/error.h>
#include <sqrtdk/format.h>
#include <sqrtdk/generate.h>
#include <sqrtdk/isa.h>
#include <sqrtdk/model.h>
#include <sqrtdk/profiler.h>
#include <sqrtdk/scheduler.h>
#include <sqrtdk/session.h>
#include <sqrtdk/tokenizer.h>
#include <sqrtdk/version.h>
