// Reading what a user writes for the mixed-precision module (--amp-lists, --amp-lists-file,
// --precision-policy): the JSON file, the op names, and the echo of user text in messages.
// Every problem is one campo::Error line that names where it is ("<kind> <path>: ...").
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ops/op.h"

namespace campo {

// Echoes of user text in messages stay one readable line: the text, or its first 60
// characters and its length.
std::string shown(const std::string& text);

// The JSON value of the file at `path`, which `kind` names in messages ("mixed-precision list
// file"): refuses a path that is not a regular file (a FIFO would hang the read), one that
// cannot be read, text that is not JSON, and an object that holds a key twice (nlohmann would
// keep the last silently).
nlohmann::json read_json_file(const std::string& path, const std::string& kind);
// The same checks on JSON text; `file` ("<kind> <path>") names it in messages.
nlohmann::json parse_json_text(const std::string& text, const std::string& file);

// An op named by its TensorFlow name (campo's, DESIGN.md); `where` prefixes the message for an
// empty or unknown name.
OpKind parse_op_in(const std::string& name, const std::string& where);

}  // namespace campo
