#include "train/prefetch.h"

#include "graph/executor.h"
#include "runtime/backend.h"
#include "runtime/check.h"

namespace campo {

InputPrefetch::~InputPrefetch() {
  if (pending_.empty()) return;
  try {
    backend_.synchronize();
  } catch (...) {  // the backend reports its own failure; a destructor must not throw
  }
}

void InputPrefetch::upload(Executable& exe,
                           const std::vector<std::pair<std::string, Tensor>>& inputs,
                           const std::vector<const Batch*>& key) {
  CAMPO_CHECK(pending_.empty(), "internal: a prefetch uploaded twice without a step between");
  for (const auto& [name, host] : inputs) {
    const Tensor& dst = exe.input(name);
    CAMPO_CHECK(host.dtype() == dst.dtype() && host.shape() == dst.shape(), "placeholder '", name,
                "' is ", dtype_name(dst.dtype()), shape_str(dst.shape()), ", prefetched ",
                dtype_name(host.dtype()), shape_str(host.shape()));
    auto it = staged_.find(name);
    if (it == staged_.end())
      it = staged_.emplace(name, backend_.empty(dst.shape(), dst.dtype())).first;
    backend_.upload(it->second, host.data());
    pending_.push_back(name);
  }
  key_ = key;
}

bool InputPrefetch::land(Executable& exe, const std::vector<const Batch*>& key) {
  const bool hit = !pending_.empty() && key == key_;
  if (hit) {
    std::vector<Backend::UploadCopy> copies;
    for (const std::string& name : pending_)
      copies.emplace_back(&exe.input(name), &staged_.at(name));
    backend_.land_uploads(copies);
    ++landed_;
  } else if (!pending_.empty()) {
    backend_.land_uploads({});  // an upload nobody takes: ordered before the next one
  }
  pending_.clear();
  key_.clear();
  return hit;
}

}  // namespace campo
