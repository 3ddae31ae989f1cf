#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "forge/error.h"
#include "io/mapping_guard.h"

namespace forge::io {
namespace {

[[noreturn]] void fail_io(const char* context, const std::string& path, const std::string& what) {
  throw Error(ErrorKind::Io, std::string(context) + ": " + path + ": " + what);
}

// Closes the descriptor on every path out of open().
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path, const char* context) {
  Fd f;
  do {
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (f.fd < 0 && errno == EINTR);
  if (f.fd < 0) fail_io(context, path, std::strerror(errno));
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) fail_io(context, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail_io(context, path, "not a regular file");

  std::shared_ptr<MappedFile> m(new MappedFile());  // private constructor: no make_shared
  m->size_ = static_cast<size_t>(st.st_size);
#ifdef __EMSCRIPTEN__
  // wasm has no file mappings (emscripten's mmap cannot place a file over a reservation):
  // the file is read into memory, with the zero tail after it.
  constexpr size_t kTail = 4096;
  if (m->size_ > SIZE_MAX - 2 * kTail) fail_io(context, path, "file too large to read");
  m->data_ =
      static_cast<std::byte*>(std::aligned_alloc(kTail, (m->size_ + 2 * kTail) / kTail * kTail));
  if (!m->data_) fail_io(context, path, "out of memory reading the file");
  m->owned_ = true;
  std::memset(m->data_ + m->size_, 0, kTail);
  for (size_t done = 0; done < m->size_;) {
    const ssize_t n = ::read(f.fd, m->data_ + done, std::min<size_t>(m->size_ - done, 1 << 26));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail_io(context, path, std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) fail_io(context, path, "the file shrank while being read");
    done += static_cast<size_t>(n);
  }
  return m;
#else
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t file_pages = (m->size_ + page - 1) / page * page;
  // One spare page after the file: reads past the file's end land in zeroed anonymous
  // memory instead of faulting (a file mapping past EOF raises SIGBUS).
  if (file_pages > SIZE_MAX - page) fail_io(context, path, "file too large to map");
  m->map_bytes_ = file_pages + page;

  // Preferred: map the file where the kernel likes, then the spare page right after it
  // (MAP_FIXED_NOREPLACE fails instead of clobbering anything already there). A file mapped
  // with MAP_FIXED over an anonymous reservation (the fallback below) read several times
  // slower in GEMV-style access on a virtualized kernel (docs/PERFORMANCE.md, "Measurements
  // that shaped the kernels").
  if (m->size_ > 0) {
    void* file = ::mmap(nullptr, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, f.fd, 0);
    if (file != MAP_FAILED) {
      std::byte* want = static_cast<std::byte*>(file) + file_pages;
      void* tail = ::mmap(want, page, PROT_READ | PROT_WRITE,
                          MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
      if (tail == want) {
        m->data_ = static_cast<std::byte*>(file);
        m->guard_slot_ = guard_mapping(m->data_, m->size_, path);
        return m;
      }
      // Taken (or a kernel without MAP_FIXED_NOREPLACE put it elsewhere): undo, fall back.
      if (tail != MAP_FAILED) ::munmap(tail, page);
      ::munmap(file, m->size_);
    }
  }
  // Fallback: reserve the whole range anonymously, then map the file over its start
  // (MAP_FIXED replaces the reservation's first pages atomically).
  void* base =
      ::mmap(nullptr, m->map_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    m->map_bytes_ = 0;
    fail_io(context, path, std::string("cannot reserve memory: ") + std::strerror(errno));
  }
  m->data_ = static_cast<std::byte*>(base);
  if (m->size_ > 0) {
    void* at = ::mmap(base, m->size_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED, f.fd, 0);
    if (at == MAP_FAILED) {
      const int err = errno;
      // m's destructor unmaps the reservation.
      fail_io(context, path, std::string("cannot map: ") + std::strerror(err));
    }
  }
  m->guard_slot_ = guard_mapping(m->data_, m->size_, path);
  return m;
#endif
}

MappedFile::~MappedFile() {
  unguard_mapping(guard_slot_);
  if (owned_)
    std::free(data_);
  else if (data_ && map_bytes_)
    ::munmap(data_, map_bytes_);
}

}  // namespace forge::io
