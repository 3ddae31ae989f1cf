// Token files in llm.c's shard layout: a 1024-byte header of 256 little-endian int32
// (magic, version, count), then the tokens as uint16 (version 1) or uint32 (version 2).
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "forge/data.h"
#include "forge/error.h"
#include "io/atomic_file.h"

namespace forge::data {
namespace {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian; a big-endian host would need byte swaps");

constexpr int32_t kMagic = 20240520;
constexpr size_t kHeaderInts = 256;
constexpr size_t kHeaderBytes = kHeaderInts * sizeof(int32_t);

[[noreturn]] void fail(ErrorKind kind, const char* fn, const std::string& path,
                       const std::string& what) {
  throw Error(kind, std::string(fn) + ": " + path + ": " + what);
}

}  // namespace

void write_token_file(const std::string& path, std::span<const uint32_t> tokens) {
  // The header's count is an int32.
  if (tokens.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
    throw Error(ErrorKind::Range, "write_token_file: " + path + ": " +
                                      std::to_string(tokens.size()) +
                                      " tokens, more than a token file's int32 count can hold");
  const bool narrow = std::all_of(tokens.begin(), tokens.end(), [](uint32_t t) {
    return t <= std::numeric_limits<uint16_t>::max();
  });
  std::array<int32_t, kHeaderInts> header{};
  header[0] = kMagic;
  header[1] = narrow ? 1 : 2;
  header[2] = static_cast<int32_t>(tokens.size());

  io::AtomicFile file(path, "write_token_file");
  file.write(header.data(), kHeaderBytes);
  if (!narrow) {
    file.write(tokens.data(), tokens.size_bytes());
  } else {
    // Narrowed in blocks so a large file needs no second full-size buffer.
    std::vector<uint16_t> block;
    constexpr size_t kBlock = 1 << 16;
    for (size_t i = 0; i < tokens.size(); i += kBlock) {
      const size_t n = std::min(kBlock, tokens.size() - i);
      block.assign(tokens.begin() + static_cast<ptrdiff_t>(i),
                   tokens.begin() + static_cast<ptrdiff_t>(i + n));
      file.write(block.data(), n * sizeof(uint16_t));
    }
  }
  file.commit();
}

std::vector<uint32_t> read_token_file(const std::string& path) {
  constexpr const char* fn = "read_token_file";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) fail(ErrorKind::Io, fn, path, "no such file");
  if (!std::filesystem::is_regular_file(path, ec))
    fail(ErrorKind::Io, fn, path, "not a regular file");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (ec) fail(ErrorKind::Io, fn, path, "cannot read its size: " + ec.message());
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::Io, fn, path, "cannot open for reading");

  if (size < kHeaderBytes)
    fail(ErrorKind::Format, fn, path,
         "truncated header: " + std::to_string(size) + " bytes, a token file starts with " +
             std::to_string(kHeaderBytes));
  std::array<int32_t, kHeaderInts> header{};
  f.read(reinterpret_cast<char*>(header.data()), kHeaderBytes);
  if (!f) fail(ErrorKind::Io, fn, path, "cannot read the header");
  if (header[0] != kMagic)
    fail(ErrorKind::Format, fn, path,
         "bad magic " + std::to_string(header[0]) + " (expected " + std::to_string(kMagic) +
             "): not a token file");
  if (header[1] != 1 && header[1] != 2)
    fail(ErrorKind::Format, fn, path,
         "unknown version " + std::to_string(header[1]) + " (1: uint16 tokens, 2: uint32 tokens)");
  if (header[2] < 0)
    fail(ErrorKind::Format, fn, path, "negative token count " + std::to_string(header[2]));
  const size_t width = header[1] == 1 ? 2 : 4;
  const auto count = static_cast<size_t>(header[2]);
  // The size must match exactly: this also bounds the allocation below by the file's size.
  if (size - kHeaderBytes != count * width)
    fail(ErrorKind::Format, fn, path,
         "the header says " + std::to_string(count) + " tokens of " + std::to_string(width) +
             " bytes (" + std::to_string(kHeaderBytes + count * width) +
             " bytes in all), but the file has " + std::to_string(size) + " bytes");

  std::vector<uint32_t> tokens(count);
  if (width == 4) {
    f.read(reinterpret_cast<char*>(tokens.data()), static_cast<std::streamsize>(count * 4));
  } else {
    std::vector<uint16_t> narrow(count);
    f.read(reinterpret_cast<char*>(narrow.data()), static_cast<std::streamsize>(count * 2));
    std::copy(narrow.begin(), narrow.end(), tokens.begin());
  }
  if (!f) fail(ErrorKind::Io, fn, path, "cannot read the tokens");
  return tokens;
}

bool is_token_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return false;
  std::ifstream f(path, std::ios::binary);
  int32_t magic = 0;
  if (!f.read(reinterpret_cast<char*>(&magic), sizeof magic)) return false;
  return magic == kMagic;
}

}  // namespace forge::data
