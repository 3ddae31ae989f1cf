// A SAX handler validates the header while nlohmann's parser reads it: no JSON tree is built
// (memory stays proportional to the tensors found), nesting deeper than the format allows is
// rejected at once, and duplicate keys — which a DOM parse would silently collapse — are
// seen and rejected.
#include "io/safetensors_header.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "forge/error.h"

namespace forge::io {
namespace {

constexpr SafetensorsDType kDTypes[] = {
    {"BOOL", 8},    {"U8", 8},   {"I8", 8},   {"F8_E5M2", 8}, {"F8_E4M3", 8},
    {"F8_E8M0", 8}, {"I16", 16}, {"U16", 16}, {"F16", 16},    {"BF16", 16},
    {"I32", 32},    {"U32", 32}, {"F32", 32}, {"F64", 64},    {"I64", 64},
    {"U64", 64},    {"C64", 64}, {"F4", 4},   {"F6_E2M3", 6}, {"F6_E3M2", 6},
};

// Quotes a name for a message; long names (a hostile header may hold megabyte keys) are cut.
std::string quote_name(const std::string& s) {
  constexpr size_t kMax = 80;
  if (s.size() <= kMax) return "'" + s + "'";
  return "'" + s.substr(0, kMax) + "...'";
}

class HeaderSax {
 public:
  using json = nlohmann::json;

  explicit HeaderSax(uint64_t data_size) : data_size_(data_size) {}

  const std::string& error() const { return error_; }
  ParsedHeader& result() { return out_; }

  // --- nlohmann SAX interface ---
  bool null() { return bad_value("null"); }
  bool boolean(bool) { return bad_value("a boolean"); }
  bool number_integer(json::number_integer_t v) {
    // nlohmann reports non-negative integers through number_unsigned; these are negative.
    if (where_ == Where::Shape)
      return fail(tensor_ctx() + "negative dimension " + std::to_string(v) + " in shape");
    if (where_ == Where::Offsets)
      return fail(tensor_ctx() + "negative data offset " + std::to_string(v));
    return bad_value("a number");
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (where_ == Where::Shape) {
      if (dims_.size() >= kMaxRank)
        return fail(tensor_ctx() + "shape has more than " + std::to_string(kMaxRank) +
                    " dimensions");
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return fail(tensor_ctx() + "dimension " + std::to_string(v) + " is too large");
      dims_.push_back(static_cast<int64_t>(v));
      return true;
    }
    if (where_ == Where::Offsets) {
      if (offsets_.size() >= 2)
        return fail(tensor_ctx() + "data_offsets must hold exactly two numbers");
      offsets_.push_back(v);
      return true;
    }
    return bad_value("a number");
  }
  bool number_float(json::number_float_t, const std::string& text) {
    if (where_ == Where::Shape)
      return fail(tensor_ctx() + "shape entry " + text + " is not a non-negative integer");
    if (where_ == Where::Offsets)
      return fail(tensor_ctx() + "data offset " + text + " is not a non-negative integer");
    return bad_value("a number");
  }
  bool string(json::string_t& s) {
    if (where_ == Where::Tensor && field_ == Field::DType) {
      const SafetensorsDType* d = find_safetensors_dtype(s);
      if (!d) return fail(tensor_ctx() + "unknown dtype " + quote_name(s));
      dtype_ = d;
      return true;
    }
    if (where_ == Where::Meta) {
      out_.metadata.emplace(meta_key_, std::move(s));
      return true;
    }
    return bad_value("a string");
  }
  bool binary(json::binary_t&) { return bad_value("binary data"); }

  bool start_object(std::size_t) {
    switch (where_) {
      case Where::Start: where_ = Where::Root; return true;
      case Where::Root:
        if (key_ == "__metadata__") {
          where_ = Where::Meta;
        } else {
          where_ = Where::Tensor;
          dtype_ = nullptr;
          has_shape_ = has_offsets_ = false;
          dims_.clear();
          offsets_.clear();
        }
        return true;
      default: return bad_value("an object");
    }
  }
  bool key(json::string_t& k) {
    switch (where_) {
      case Where::Root:
        if (!names_.insert(k).second) {
          return fail(k == "__metadata__" ? std::string("duplicate __metadata__")
                                          : "duplicate tensor name " + quote_name(k));
        }
        key_ = std::move(k);
        return true;
      case Where::Tensor: {
        Field f;
        bool seen;
        if (k == "dtype") {
          f = Field::DType;
          seen = dtype_ != nullptr;
        } else if (k == "shape") {
          f = Field::Shape;
          seen = has_shape_;
        } else if (k == "data_offsets") {
          f = Field::Offsets;
          seen = has_offsets_;
        } else {
          return fail(tensor_ctx() + "unexpected field " + quote_name(k) +
                      " (expected dtype, shape, data_offsets)");
        }
        if (seen) return fail(tensor_ctx() + "duplicate field " + quote_name(k));
        field_ = f;
        return true;
      }
      case Where::Meta:
        if (out_.metadata.count(k)) return fail("duplicate __metadata__ key " + quote_name(k));
        meta_key_ = std::move(k);
        return true;
      default: return fail("unexpected key");  // unreachable: keys only occur inside objects
    }
  }
  bool end_object() {
    switch (where_) {
      case Where::Root: where_ = Where::Done; return true;
      case Where::Meta: where_ = Where::Root; return true;
      case Where::Tensor: where_ = Where::Root; return finish_tensor();
      default: return fail("unexpected end of object");  // unreachable
    }
  }
  bool start_array(std::size_t) {
    if (where_ == Where::Tensor && field_ == Field::Shape) {
      where_ = Where::Shape;
      return true;
    }
    if (where_ == Where::Tensor && field_ == Field::Offsets) {
      where_ = Where::Offsets;
      return true;
    }
    return bad_value("an array");
  }
  bool end_array() {
    if (where_ == Where::Shape) {
      has_shape_ = true;
    } else if (where_ == Where::Offsets) {
      if (offsets_.size() != 2)
        return fail(tensor_ctx() + "data_offsets must hold exactly two numbers");
      has_offsets_ = true;
    } else {
      return fail("unexpected end of array");  // unreachable
    }
    where_ = Where::Tensor;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& ex) {
    // Drop nlohmann's "[json.exception.parse_error.101] " tag; keep the position and reason.
    std::string what = ex.what();
    if (!what.empty() && what[0] == '[') {
      const auto close = what.find("] ");
      if (close != std::string::npos) what = what.substr(close + 2);
    }
    return fail("header is not valid JSON: " + what);
  }

 private:
  enum class Where { Start, Root, Tensor, Shape, Offsets, Meta, Done };
  enum class Field { DType, Shape, Offsets };

  bool fail(std::string what) {
    if (error_.empty()) error_ = std::move(what);
    return false;
  }

  std::string tensor_ctx() const { return "tensor " + quote_name(key_) + ": "; }

  // A value of the wrong JSON type, described where it was found.
  bool bad_value(const char* found) {
    switch (where_) {
      case Where::Start:
        return fail(std::string("header is not a JSON object (found ") + found + ")");
      case Where::Root:
        if (key_ == "__metadata__")
          return fail(std::string("__metadata__ must be an object of strings, found ") + found);
        return fail(tensor_ctx() + "entry must be an object, found " + found);
      case Where::Tensor:
        switch (field_) {
          case Field::DType: return fail(tensor_ctx() + "dtype must be a string, found " + found);
          case Field::Shape:
            return fail(tensor_ctx() + "shape must be an array of integers, found " + found);
          case Field::Offsets:
            return fail(tensor_ctx() + "data_offsets must be an array of two integers, found " +
                        found);
        }
        break;
      case Where::Shape:
        return fail(tensor_ctx() + "shape entries must be non-negative integers, found " + found);
      case Where::Offsets:
        return fail(tensor_ctx() + "data_offsets entries must be non-negative integers, found " +
                    found);
      case Where::Meta:
        return fail("__metadata__ value for " + quote_name(meta_key_) +
                    " must be a string, found " + found);
      case Where::Done: break;
    }
    return fail(std::string("unexpected ") + found);
  }

  bool finish_tensor() {
    if (!dtype_) return fail(tensor_ctx() + "missing dtype");
    if (!has_shape_) return fail(tensor_ctx() + "missing shape");
    if (!has_offsets_) return fail(tensor_ctx() + "missing data_offsets");
    const uint64_t begin = offsets_[0], end = offsets_[1];
    if (begin > end)
      return fail(tensor_ctx() + "data_offsets [" + std::to_string(begin) + ", " +
                  std::to_string(end) + "] begin after end");
    if (end > data_size_)
      return fail(tensor_ctx() + "data_offsets [" + std::to_string(begin) + ", " +
                  std::to_string(end) + "] outside the data buffer of " +
                  std::to_string(data_size_) + " bytes");
    // numel * bits, overflow-checked: dims are each < 2^63 but their product need not be.
    uint64_t bits = dtype_->bits;
    for (int64_t d : dims_) {
      if (__builtin_mul_overflow(bits, static_cast<uint64_t>(d), &bits))
        return fail(tensor_ctx() + "shape " + Shape(dims_).str() + " is too large");
    }
    const Shape shape(dims_);
    if (bits % 8 != 0)
      return fail(tensor_ctx() + "shape " + shape.str() + " of " + dtype_->name +
                  " is not a whole number of bytes");
    if (bits / 8 != end - begin)
      return fail(tensor_ctx() + "shape " + shape.str() + " of " + dtype_->name + " needs " +
                  std::to_string(bits / 8) + " bytes but data_offsets [" + std::to_string(begin) +
                  ", " + std::to_string(end) + "] span " + std::to_string(end - begin));
    TensorInfo info;
    info.dtype = dtype_->name;
    info.shape = shape;
    info.begin = begin;
    info.end = end;
    out_.tensors.emplace_back(key_, std::move(info));
    return true;
  }

  uint64_t data_size_;
  std::string error_;
  ParsedHeader out_;
  Where where_ = Where::Start;
  std::unordered_set<std::string> names_;  // root keys seen (tensors and __metadata__)
  std::string key_;                        // current root key
  std::string meta_key_;                   // current __metadata__ key
  Field field_ = Field::DType;             // current tensor field
  const SafetensorsDType* dtype_ = nullptr;
  bool has_shape_ = false, has_offsets_ = false;
  std::vector<int64_t> dims_;
  std::vector<uint64_t> offsets_;
};

}  // namespace

const SafetensorsDType* find_safetensors_dtype(std::string_view name) {
  for (const SafetensorsDType& d : kDTypes)
    if (name == d.name) return &d;
  return nullptr;
}

ParsedHeader parse_safetensors_header(std::string_view json, uint64_t data_size,
                                      const std::string& prefix) {
  HeaderSax sax(data_size);
  const bool ok = nlohmann::json::sax_parse(json.begin(), json.end(), &sax);
  if (!ok || !sax.error().empty())
    throw Error(ErrorKind::Format,
                prefix + ": " + (sax.error().empty() ? "invalid header" : sax.error()));
  ParsedHeader out = std::move(sax.result());

  // The format requires the tensors to tile the data buffer exactly: no overlap (two
  // tensors sharing bytes), no hole, nothing after the last one (no hidden payload).
  auto& ts = out.tensors;
  std::sort(ts.begin(), ts.end(), [](const auto& a, const auto& b) {
    if (a.second.begin != b.second.begin) return a.second.begin < b.second.begin;
    if (a.second.end != b.second.end) return a.second.end < b.second.end;
    return a.first < b.first;
  });
  uint64_t pos = 0;
  const std::string* prev = nullptr;
  for (const auto& [name, info] : ts) {
    if (info.begin < pos)
      throw Error(ErrorKind::Format, prefix + ": tensors " + quote_name(*prev) + " and " +
                                         quote_name(name) + " overlap at byte " +
                                         std::to_string(info.begin));
    if (info.begin > pos)
      throw Error(ErrorKind::Format,
                  prefix + ": bytes " + std::to_string(pos) + " to " + std::to_string(info.begin) +
                      " of the data buffer belong to no tensor (before " + quote_name(name) + ")");
    pos = info.end;
    prev = &name;
  }
  if (pos != data_size)
    throw Error(ErrorKind::Format, prefix + ": the data buffer has " + std::to_string(data_size) +
                                       " bytes but the tensors use " + std::to_string(pos));
  return out;
}

}  // namespace forge::io
