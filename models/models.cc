#include "models/models.h"

#include <algorithm>

namespace campo {

namespace {
struct Entry {
  const char* name;
  ValueId (*build)(Builder&, ValueId, const ModelOptions&);
};
const Entry kModels[] = {
    {"mlp", build_mlp},
    {"lenet", build_lenet},
};
}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const Entry& e : kModels) out.push_back(e.name);
  return out;
}

bool is_known_model(const std::string& name) {
  for (const Entry& e : kModels)
    if (name == e.name) return true;
  return false;
}

ValueId build_model(const std::string& name, Builder& b, ValueId images, const ModelOptions& o) {
  for (const Entry& e : kModels)
    if (name == e.name) return e.build(b, images, o);
  std::string known;
  for (const Entry& e : kModels) known += std::string(known.empty() ? "" : ", ") + e.name;
  CAMPO_FAIL("unknown model '", name, "' (known models: ", known, ")");
}

}  // namespace campo
