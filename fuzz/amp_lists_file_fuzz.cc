// Mixed-precision list files, --amp-lists-file (amp/lists.cc): the input is the JSON file
// of edits applied to the default lists.
#include "amp/lists.h"
#include "fuzz/fuzz_util.h"
#include "fuzz/targets.h"

namespace campo::fuzz {

void amp_lists_file(const uint8_t* data, size_t size) {
  TempInput input("amp-lists", data, size);
  AmpLists lists = AmpLists::defaults(Device::cpu, DType::bf16);
  reject_or_accept([&] { lists.edit_from_file(input.path()); });
  lists.describe();
}

}  // namespace campo::fuzz

CAMPO_FUZZ_ENTRY_POINT(campo::fuzz::amp_lists_file)
