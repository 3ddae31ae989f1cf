#include "io/mapping_guard.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>

#include "forge/error.h"
#include "forge/mapped_files.h"

namespace forge::io {
namespace {

// The handler's view: begin/end of each guarded range (0/0: a free slot) and whether a read
// in it faulted. Only atomics, so that the handler never takes a lock.
constexpr int kSlots = 1024;
struct Slot {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> damaged{false};
};
Slot g_slots[kSlots];
// Set with any slot's `damaged`: check_mapped_files(), called for every generated token,
// returns at once while no fault ever happened.
std::atomic<bool> g_any_damaged{false};

// The normal code's view: the path of each slot in use (for messages).
std::mutex g_mutex;
std::map<int, std::string>& paths() {
  static std::map<int, std::string> p;
  return p;
}

struct sigaction g_previous {};

void on_sigbus(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Slot& s : g_slots) {
    const uintptr_t b = s.begin.load(std::memory_order_acquire);
    if (b == 0 || addr < b || addr >= s.end.load(std::memory_order_acquire)) continue;
    // A page of the mapped file is gone (the file shrank): zeros in its place, and the
    // faulting read runs again on them. check_mapped_files() reports it.
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    void* at = reinterpret_cast<void*>(addr & ~(page - 1));
    if (::mmap(at, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) ==
        at) {
      s.damaged.store(true, std::memory_order_release);
      g_any_damaged.store(true, std::memory_order_release);
      return;
    }
    break;
  }
  // Not ours (or the zero page could not be mapped): what would have happened without us.
  if (g_previous.sa_flags & SA_SIGINFO) {
    if (g_previous.sa_sigaction) return g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN) {
    return g_previous.sa_handler(sig);
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

void install_handler() {
#ifdef __EMSCRIPTEN__
  return;  // wasm reads files into memory (mapped_file.cpp): nothing can vanish
#endif
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_sigaction = on_sigbus;
    sa.sa_flags = SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    ::sigaction(SIGBUS, &sa, &g_previous);
  });
}

}  // namespace

int guard_mapping(const void* begin, size_t bytes, const std::string& path) {
  if (bytes == 0) return -1;
  install_handler();
  std::lock_guard lock(g_mutex);
  for (int i = 0; i < kSlots; ++i) {
    if (g_slots[i].begin.load(std::memory_order_relaxed) != 0) continue;
    const auto b = reinterpret_cast<uintptr_t>(begin);
    g_slots[i].damaged.store(false, std::memory_order_relaxed);
    g_slots[i].end.store(b + bytes, std::memory_order_release);
    g_slots[i].begin.store(b, std::memory_order_release);
    paths()[i] = path;
    return i;
  }
  return -1;
}

void unguard_mapping(int slot) {
  if (slot < 0) return;
  std::lock_guard lock(g_mutex);
  g_slots[slot].begin.store(0, std::memory_order_release);
  g_slots[slot].end.store(0, std::memory_order_release);
  paths().erase(slot);
}

}  // namespace forge::io

namespace forge {

void check_mapped_files() {
  if (!io::g_any_damaged.load(std::memory_order_acquire)) return;
  std::lock_guard lock(io::g_mutex);
  for (const auto& [slot, path] : io::paths())
    if (io::g_slots[slot].damaged.load(std::memory_order_acquire))
      throw Error(ErrorKind::Io, path +
                                     ": the file shrank while mapped (truncated or rewritten in "
                                     "place?): reads past its new end gave zeros, so nothing "
                                     "computed from it since can be trusted");
}

}  // namespace forge
