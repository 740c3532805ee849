// Open MPI's communicator, and the one place that asks whether this build has MPI and NCCL
// (CAMPO_HAVE_MPI, CAMPO_HAVE_NCCL: CMakeLists.txt defines them for runtime/ only).
//
// One communication thread per process owns MPI: it calls MPI_Init_thread, starts every
// collective (non-blocking, in the order the callers submitted them, which is the same
// order on every rank), drives them by testing each every kPollInterval, ends the job when
// one waits past its deadline, and at exit finalises MPI. Since MPI is called by that one
// thread only, and it is the thread that initialised MPI, MPI_THREAD_FUNNELED is all this
// needs (requested, and refused with one line should the library give less). Callers of the
// blocking collectives queue theirs and wait; start_all_reduce queues and returns, so a
// gradient bucket is reduced while the caller goes on, and finish() waits.
//
// MPI errors keep MPI's default handler (MPI_ERRORS_ARE_FATAL): MPI prints them and ends
// the job, which is what a collective whose peers are gone should do.
#include "runtime/mpi_communicator.h"

#include "runtime/check.h"
#include "runtime/collective_errors.h"

#if CAMPO_HAVE_MPI
#include <mpi.h>
#include <pthread.h>
#include <sys/prctl.h>

#include <algorithm>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>
#endif

namespace campo {

#if CAMPO_HAVE_MPI
namespace {

using Clock = std::chrono::steady_clock;

// How long the communication thread sleeps between tests of the collectives in flight.
// Open MPI's non-blocking collectives progress only inside MPI calls, so this bounds how
// late a step of a reduction starts; sleeping between tests (timer slack 1 us, below) leaves
// the cores to the compute threads (CI runs 2 ranks x 1 thread on 2 cores). With nothing in
// flight the thread does not wake at all.
constexpr std::chrono::microseconds kPollInterval{50};
// A rank that ends the job gives MPI_Abort this long to do it before ending itself.
constexpr std::chrono::seconds kAbortGrace{10};

// One collective: what the thread starts, and whether it is done.
struct Collective {
  enum class Kind : uint8_t { all_reduce, broadcast, all_gather, barrier };
  Kind kind = Kind::barrier;
  std::string what;            // names it in the timeout line
  void* data = nullptr;        // in place (all_reduce, broadcast); all_gather: receives
  const void* send = nullptr;  // all_gather: this rank's part, or MPI_IN_PLACE
  int count = 0;               // elements of `type`; all_gather: bytes per rank
  MPI_Datatype type = MPI_BYTE;
  MPI_Op op = MPI_SUM;
  int root = 0;
  std::chrono::milliseconds timeout{0};
  Clock::time_point deadline;  // submission + timeout
  MPI_Request request = MPI_REQUEST_NULL;
  bool done = false;  // guarded by the engine's mutex
  // When the thread started it and first saw it done (read once `done`).
  Clock::time_point started, finished;
};

int checked_count(int64_t n, const char* unit) {
  CAMPO_CHECK(n >= 0 && n <= INT_MAX, "a collective of ", n, " ", unit,
              ": MPI counts go to 2^31 - 1; use smaller gradient buckets (--bucket-mb)");
  return int(n);
}

MPI_Datatype mpi_type(DType t) {
  switch (t) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    default:
      CAMPO_FAIL("internal: no MPI type for ", dtype_name(t));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return MPI_SUM;
    case ReduceOp::max:
      return MPI_MAX;
    case ReduceOp::min:
      return MPI_MIN;
  }
  CAMPO_FAIL("internal: unknown ReduceOp");
}

// MPI and its communication thread: one per process, started by the first communicator
// and never destroyed. MPI can be initialised once per process only (not again after
// MPI_Finalize), so its owner is process-wide too; it is left to the exit handler, which
// runs after main returns, when no communicator is in use any more.
class MpiEngine {
 public:
  // The engine, started by the first call; the start's error line from every call when it
  // failed.
  static MpiEngine& instance() {
    static std::mutex mu;
    static MpiEngine* engine = nullptr;
    std::lock_guard<std::mutex> lock(mu);
    if (!engine) engine = new MpiEngine();
    CAMPO_CHECK(engine->start_error_.empty(), engine->start_error_);
    return *engine;
  }

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Queues `c` behind the collectives submitted before it; the thread starts it.
  std::shared_ptr<Collective> submit(Collective c) {
    auto p = std::make_shared<Collective>(std::move(c));
    p->deadline = Clock::now() + p->timeout;
    {
      std::lock_guard<std::mutex> lock(mu_);
      CAMPO_CHECK(!exit_status_, "internal: a collective submitted after the exit began");
      queue_.push_back(p);
      last_timeout_ = p->timeout;
    }
    wake_.notify_one();
    return p;
  }

  // Blocks until `c` is done. Waits no longer than c's deadline: past it the thread ends
  // the job.
  void wait(const Collective& c) {
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return c.done; });
  }

  [[noreturn]] void end_job(const std::string& line) {
    if (std::this_thread::get_id() == thread_.get_id()) abort_job(line);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (abort_line_.empty()) abort_line_ = line;
    }
    wake_.notify_one();
    // The thread aborts the job; should it be unable to (gone at exit), this rank ends.
    std::this_thread::sleep_for(kAbortGrace);
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  }

 private:
  MpiEngine() {
    thread_ = std::thread([this] { run(); });
    std::unique_lock<std::mutex> lock(mu_);
    done_.wait(lock, [&] { return started_ || !start_error_.empty(); });
    if (!start_error_.empty()) {
      lock.unlock();
      thread_.join();
      return;
    }
    on_exit(&MpiEngine::on_process_exit, this);
  }

  static void on_process_exit(int status, void* engine) {
    static_cast<MpiEngine*>(engine)->stop(status);
  }

  // At exit: lets the thread leave MPI (leave()) and waits for it.
  void stop(int status) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      exit_status_ = status;
    }
    wake_.notify_one();
    if (thread_.joinable() && std::this_thread::get_id() != thread_.get_id()) thread_.join();
  }

  // The communication thread.
  void run() {
    pthread_setname_np(pthread_self(), "campo-mpi");
    // Sleeps of kPollInterval take that long, not the default 50 us of slack more.
    prctl(PR_SET_TIMERSLACK, 1000UL, 0UL, 0UL, 0UL);
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    if (provided < MPI_THREAD_FUNNELED) {
      MPI_Finalize();
      std::lock_guard<std::mutex> lock(mu_);
      start_error_ = "--data-parallel: this MPI library gives thread level " +
                     std::to_string(provided) +
                     ", below MPI_THREAD_FUNNELED, which campo's communication thread needs";
      done_.notify_all();
      return;
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    {
      std::lock_guard<std::mutex> lock(mu_);
      started_ = true;
    }
    done_.notify_all();

    std::vector<std::shared_ptr<Collective>> in_flight;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!abort_line_.empty()) {
        const std::string line = abort_line_;
        lock.unlock();
        abort_job(line);
      }
      if (exit_status_ && *exit_status_ != 0) break;  // not waiting for anything: see leave()
      while (!queue_.empty()) {
        std::shared_ptr<Collective> c = std::move(queue_.front());
        queue_.pop_front();
        lock.unlock();
        start(*c);
        lock.lock();
        in_flight.push_back(std::move(c));
      }
      if (in_flight.empty()) {
        if (exit_status_) break;
        wake_.wait(lock, [&] { return !queue_.empty() || exit_status_ || !abort_line_.empty(); });
        continue;
      }
      lock.unlock();
      test(in_flight);
      lock.lock();
      if (!in_flight.empty())
        wake_.wait_for(lock, kPollInterval,
                       [&] { return !queue_.empty() || !abort_line_.empty(); });
    }
    const int status = *exit_status_;
    lock.unlock();
    leave(status);
  }

  void start(Collective& c) {
    c.started = Clock::now();
    switch (c.kind) {
      case Collective::Kind::all_reduce:
        MPI_Iallreduce(MPI_IN_PLACE, c.data, c.count, c.type, c.op, MPI_COMM_WORLD, &c.request);
        break;
      case Collective::Kind::broadcast:
        MPI_Ibcast(c.data, c.count, MPI_BYTE, c.root, MPI_COMM_WORLD, &c.request);
        break;
      case Collective::Kind::all_gather:
        MPI_Iallgather(c.send, c.count, MPI_BYTE, c.data, c.count, MPI_BYTE, MPI_COMM_WORLD,
                       &c.request);
        break;
      case Collective::Kind::barrier:
        MPI_Ibarrier(MPI_COMM_WORLD, &c.request);
        break;
    }
  }

  // Tests each collective in flight once: the done ones leave the list and their callers
  // wake; one past its deadline ends the job.
  void test(std::vector<std::shared_ptr<Collective>>& in_flight) {
    bool any_done = false;
    for (auto it = in_flight.begin(); it != in_flight.end();) {
      int flag = 0;
      MPI_Test(&(*it)->request, &flag, MPI_STATUS_IGNORE);
      if (flag) {
        (*it)->finished = Clock::now();
        std::lock_guard<std::mutex> lock(mu_);
        (*it)->done = true;
        any_done = true;
        it = in_flight.erase(it);
      } else {
        ++it;
      }
    }
    if (any_done) done_.notify_all();
    const Clock::time_point now = Clock::now();
    for (const std::shared_ptr<Collective>& c : in_flight)
      if (now > c->deadline) abort_job(detail::timeout_line(rank_, size_, c->what, c->timeout));
  }

  // At exit, on the thread. Status 0: the run ended well here; meet the other ranks (a
  // barrier, within the last timeout a collective was given, so that one rank still busy or
  // hung ends the job rather than this one's MPI_Finalize waiting for it forever) and
  // finalise, so that mpirun reports a clean end. Another status: the run failed here while
  // the other ranks may wait for this one in a collective; MPI is not finalised (that would
  // wait for them) and the process exits, which makes mpirun end every rank at once and
  // exit with this status.
  void leave(int status) {
    if (status != 0) return;
    Collective barrier;
    barrier.what = "end of the run";
    barrier.timeout = last_timeout_;
    barrier.deadline = Clock::now() + barrier.timeout;
    start(barrier);
    for (;;) {
      int flag = 0;
      MPI_Test(&barrier.request, &flag, MPI_STATUS_IGNORE);
      if (flag) break;
      if (Clock::now() > barrier.deadline)
        abort_job(detail::timeout_line(rank_, size_, barrier.what, barrier.timeout));
      std::this_thread::sleep_for(kPollInterval);
    }
    MPI_Finalize();
  }

  // On the thread: the line, then MPI_Abort, which makes mpirun end every rank. Should
  // MPI_Abort not end this process within kAbortGrace, it ends itself.
  [[noreturn]] void abort_job(const std::string& line) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    std::thread([] {
      std::this_thread::sleep_for(kAbortGrace);
      std::_Exit(1);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::_Exit(1);
  }

  std::mutex mu_;
  std::condition_variable wake_;  // the thread: a collective submitted, the exit, an abort
  std::condition_variable done_;  // callers: the start, a collective done
  std::deque<std::shared_ptr<Collective>> queue_;  // submitted, not started yet
  std::optional<int> exit_status_;
  std::string abort_line_;
  bool started_ = false;
  std::string start_error_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds last_timeout_{std::chrono::minutes(10)};
  std::thread thread_;
};

// A handle on the engine; each has its own timeout() and tickets.
class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MpiEngine& engine) : engine_(engine) {}

  int rank() const override { return engine_.rank(); }
  int size() const override { return engine_.size(); }
  std::string transport() const override { return "mpi"; }
  bool reduce_timed() const override { return true; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op) override {
    detail::check_host_all_reduce(data, count, dtype);
    if (count == 0) return;
    Collective c = collective(Collective::Kind::all_reduce, "all-reduce");
    c.data = data;
    c.count = checked_count(count, "elements");
    c.type = mpi_type(dtype);
    c.op = mpi_op(op);
    run(std::move(c));
  }

  void broadcast(void* data, size_t bytes, int root) override {
    CAMPO_CHECK(root >= 0 && root < size(), "broadcast from rank ", root,
                ", but this run has ranks 0 to ", size() - 1);
    CAMPO_CHECK(bytes == 0 || data, "broadcast of ", bytes, " bytes at a null pointer");
    // In pieces of at most 1 GiB: MPI's counts are ints.
    constexpr size_t kPiece = size_t(1) << 30;
    std::vector<std::shared_ptr<Collective>> pieces;
    for (size_t offset = 0; offset < bytes; offset += kPiece) {
      Collective c = collective(Collective::Kind::broadcast, "broadcast");
      c.data = static_cast<char*>(data) + offset;
      c.count = int(std::min(kPiece, bytes - offset));
      c.root = root;
      pieces.push_back(engine_.submit(std::move(c)));
    }
    for (const std::shared_ptr<Collective>& c : pieces) engine_.wait(*c);
  }

  void all_gather(const void* mine, void* all, size_t bytes) override {
    CAMPO_CHECK(bytes == 0 || (mine && all), "all-gather of ", bytes, " bytes at a null pointer");
    if (bytes == 0) return;
    Collective c = collective(Collective::Kind::all_gather, "all-gather");
    c.data = all;
    c.count = checked_count(int64_t(bytes), "bytes per rank");
    // A part already in place is MPI_IN_PLACE: MPI forbids overlapping send and receive.
    const bool in_place = mine == static_cast<const char*>(all) + size_t(rank()) * bytes;
    c.send = in_place ? MPI_IN_PLACE : mine;
    run(std::move(c));
  }

  CommTicket start_all_reduce(float* data, int64_t count, Device device, void* stream) override {
    CAMPO_CHECK(device != Device::cuda,
                "a CUDA gradient bucket needs NCCL: the \"mpi\" communicator reduces host memory "
                "(make_mpi_communicator(Device::cuda) gives \"mpi+nccl\")");
    // Device::cpu_strict's memory is host memory too: MPI reads it as NCCL reads a GPU's.
    detail::check_host_all_reduce(data, count, DType::f32);
    std::shared_ptr<Collective> c;
    if (count > 0) {
      Collective r = collective(Collective::Kind::all_reduce, "gradient all-reduce");
      r.data = data;
      r.count = checked_count(count, "elements");
      r.type = MPI_FLOAT;
      r.op = MPI_SUM;
      c = engine_.submit(std::move(r));
    }
    std::lock_guard<std::mutex> lock(mu_);
    const CommTicket ticket = next_ticket_++;
    in_flight_.emplace(ticket, std::move(c));
    return ticket;
  }

  void finish(CommTicket ticket, void* stream) override {
    std::shared_ptr<Collective> c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = in_flight_.find(ticket);
      CAMPO_CHECK(it != in_flight_.end(), "internal: finish() of ticket ", ticket,
                  ", which is not in flight (never started, or finished already)");
      c = std::move(it->second);
      in_flight_.erase(it);
    }
    if (!c) return;
    engine_.wait(*c);
    count_reduction(std::chrono::duration<double>(c->finished - c->started).count());
  }

 private:
  Collective collective(Collective::Kind kind, const char* what) const {
    Collective c;
    c.kind = kind;
    c.what = what;
    c.timeout = timeout();
    return c;
  }
  void run(Collective c) { engine_.wait(*engine_.submit(std::move(c))); }

  MpiEngine& engine_;
  std::mutex mu_;
  CommTicket next_ticket_ = 0;
  // Started and not finished yet; null for an empty bucket.
  std::unordered_map<CommTicket, std::shared_ptr<Collective>> in_flight_;
};

}  // namespace

namespace detail {

std::shared_ptr<Communicator> make_mpi_host_communicator() {
  return std::make_shared<MpiCommunicator>(MpiEngine::instance());
}

void end_job(const std::string& line) { MpiEngine::instance().end_job(line); }

}  // namespace detail
#endif  // CAMPO_HAVE_MPI

bool mpi_built_in() {
#if CAMPO_HAVE_MPI
  return true;
#else
  return false;
#endif
}

bool nccl_built_in() {
#if CAMPO_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

std::shared_ptr<Communicator> make_mpi_communicator(Device device) {
#if CAMPO_HAVE_MPI
  if (device == Device::cuda) {
#if CAMPO_HAVE_NCCL
    return detail::make_nccl_communicator();
#else
    CAMPO_FAIL(
        "--data-parallel on cuda needs NCCL, and this build has none (install NCCL "
        "next to the CUDA toolkit, nccl.h and libnccl.so, and rebuild: CMake then prints "
        "\"campo: NCCL ON\")");
#endif
  }
  return detail::make_mpi_host_communicator();
#else
  (void)device;
  CAMPO_FAIL(
      "--data-parallel needs Open MPI, and this build has none (install libopenmpi-dev "
      "and openmpi-bin, and rebuild: CMake then prints \"campo: MPI ON\")");
#endif
}

}  // namespace campo
