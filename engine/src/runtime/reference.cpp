#include "engine/src/runtime/reference.h"

#include <sqrtdk/error.h>

#include "models/family.h"

namespace sqrtdk {

std::vector<float> reference_forward(const WeightFile& file, std::span<const uint32_t> tokens) {
  const ModelFamily* family = find_family(file.config().arch);
  if (!family) throw Error(file.path() + ": unknown architecture");
  const TensorReader read = [&file](const std::string& name) {
    const TensorInfo* t = file.find(name);
    if (!t) throw Error(file.path() + ": missing tensor '" + name + "'");
    std::vector<float> out(t->n_elements());
    file.read_f32(*t, out.data());
    return out;
  };
  return family->reference_forward(file.config(), read, tokens);
}

}  // namespace sqrtdk
