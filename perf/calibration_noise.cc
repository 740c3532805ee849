// How noisy a measurement on this machine is (perf/calibration_noise.h).
#include "perf/calibration_noise.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

namespace campo {

namespace {

double monotonic_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

CpuSnapshot cpu_snapshot() {
  CpuSnapshot s;
  s.wall_s = monotonic_seconds();
  const double tick = double(sysconf(_SC_CLK_TCK));
  if (!(tick > 0)) return s;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  const bool have_mask = sched_getaffinity(0, sizeof mask, &mask) == 0;
  std::ifstream stat("/proc/stat");
  if (!stat) return s;
  std::string line;
  int cores = 0;
  double busy = 0;
  while (std::getline(stat, line)) {
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice" in ticks; guest
    // time is already inside user. Only the cores this process may run on count.
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream in(line.substr(3));
    int cpu = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    if (!in && !in.eof()) continue;
    if (cpu < 0 || (have_mask && cpu < CPU_SETSIZE && !CPU_ISSET(cpu, &mask))) continue;
    ++cores;
    busy += user + nice + system + irq + softirq + steal;
  }
  std::ifstream self("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(self)), std::istreambuf_iterator<char>());
  // The command name (field 2) may hold spaces: fields are counted after its ')'.
  const size_t close = text.rfind(')');
  if (cores == 0 || close == std::string::npos) return s;
  std::istringstream fields(text.substr(close + 2));
  std::string f;
  double utime = -1, stime = -1;
  for (int i = 3; fields >> f; ++i) {  // field 3 is the state
    if (i == 14) utime = std::stod(f);
    if (i == 15) {
      stime = std::stod(f);
      break;
    }
  }
  if (utime < 0 || stime < 0) return s;
  s.busy_s = busy / tick;
  s.own_s = (utime + stime) / tick;
  s.cores = cores;
  s.known = true;
  return s;
}

double foreign_load(const CpuSnapshot& from, const CpuSnapshot& to) {
  const double wall = to.wall_s - from.wall_s;
  if (!from.known || !to.known || !(wall > 0)) return -1;
  const double others = (to.busy_s - from.busy_s) - (to.own_s - from.own_s);
  // Ticks are 10 ms: over short intervals the two counters disagree by a tick or two.
  return std::clamp(others / wall, 0.0, double(std::max(to.cores, 1)));
}

double sample_foreign_load(double seconds) {
  const CpuSnapshot from = cpu_snapshot();
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  return foreign_load(from, cpu_snapshot());
}

double fastest_quarter_spread(std::vector<double> times) {
  if (times.size() < 4) return repeat_spread(std::move(times));
  std::sort(times.begin(), times.end());
  const double quarter = times[(times.size() - 1) / 4];
  return times[0] > 0 ? (quarter - times[0]) / times[0] : 0.0;
}

double repeat_spread(std::vector<double> times) {
  if (times.size() < 2) return 0;
  std::sort(times.begin(), times.end());
  const size_t n = times.size();
  const double median = n % 2 ? times[n / 2] : 0.5 * (times[n / 2 - 1] + times[n / 2]);
  return times[0] > 0 ? (median - times[0]) / times[0] : 0.0;
}

std::string noise_problem(double load, int cores, double spread, const NoiseLimits& limits) {
  char line[160];
  const double max_load = limits.max_load_fraction * std::max(cores, 1);
  if (load >= 0 && load > max_load) {
    std::snprintf(line, sizeof line, "other processes used %.2f of %d cores (limit %.2f)", load,
                  cores, max_load);
    return line;
  }
  if (spread > limits.max_spread) {
    std::snprintf(line, sizeof line, "its repeated steps spread %.0f%% (limit %.0f%%)",
                  100 * spread, 100 * limits.max_spread);
    return line;
  }
  return "";
}

}  // namespace campo
