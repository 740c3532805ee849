// The Session interface's shared reports (train/session.h).
#include "train/session.h"

#include <string>

#include "graph/executor.h"
#include "runtime/backend.h"

namespace campo {

nlohmann::json cuda_graph_json(const Session& session) {
  nlohmann::json j = {{"captures", 0}, {"replays", 0}, {"launched_because", nullptr}};
  for (const Executable* e : session.step_executables()) {
    if (!e) continue;
    j["captures"] = j["captures"].get<int>() + e->captures();
    j["replays"] = j["replays"].get<int64_t>() + e->replays();
    if (!e->replay_blocker().empty() && j["launched_because"].is_null())
      j["launched_because"] = e->replay_blocker();
  }
  return j;
}

std::string cuda_graph_line(const Session& session) {
  const nlohmann::json j = cuda_graph_json(session);
  if (!j["launched_because"].is_null())
    return "cuda graph: kernel by kernel (" + j["launched_because"].get<std::string>() + ")";
  const int captures = j["captures"].get<int>();
  const int64_t replays = j["replays"].get<int64_t>();
  return "cuda graph: replayed (" + std::to_string(captures) +
         (captures == 1 ? " capture, " : " captures, ") + std::to_string(replays) +
         (replays == 1 ? " replay)" : " replays)");
}

}  // namespace campo
