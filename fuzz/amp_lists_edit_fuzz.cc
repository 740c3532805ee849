// Mixed-precision list edits, --amp-lists "allow+=Tanh;clear-=Relu" (amp/lists.cc): the
// input is the option's value, applied to the default lists.
#include <string>

#include "amp/lists.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {

void amp_lists_edit(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  AmpLists lists = AmpLists::defaults(Device::cpu, DType::bf16);
  reject_or_accept([&] { lists.edit(spec); });
  lists.describe();
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::amp_lists_edit)
