// .npy reading and writing (format description: numpy/lib/format.py). POSIX file calls
// rather than iostreams, so that every failure can name errno's reason.
#include "mxtrain/npy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "io/file_util.h"
#include "mxtrain/error.h"

namespace mxtrain {
namespace {

using internal::CheckNotDirectory;
using internal::CreateTemporary;
using internal::Fd;
using internal::Printable;
using internal::ReadUpTo;
using internal::Temporaries;
using internal::WriteAll;

static_assert(std::endian::native == std::endian::little,
              "the .npy reader and writer copy little-endian data as is");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicSize = 6;
// Larger than any header the writer produces for a sane rank, small enough that a corrupt
// length field cannot make the reader allocate gigabytes.
constexpr uint32_t kMaxHeaderBytes = 16u << 20;
constexpr size_t kV1MaxHeaderBytes = 65535;  // the 2-byte length field of version 1.0
constexpr size_t kDataAlignment = 64;        // what np.save has used since NumPy 1.14

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// A recursive-descent parser for the one Python literal an .npy header holds:
// {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : text_(text), path_(path) {}

  NpyHeader Parse() {
    NpyHeader h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    Expect('{');
    while (true) {
      SkipSpace();
      if (Peek() == '}') break;
      const std::string key = ParseString();
      Expect(':');
      SkipSpace();
      if (key == "descr") {
        if (seen_descr) Malformed("key 'descr' appears twice");
        if (Peek() == '[' || Peek() == '(') {
          Fail("'", Printable(path_), "' has a structured dtype, which is not supported");
        }
        h.descr = ParseString();
        seen_descr = true;
      } else if (key == "fortran_order") {
        if (seen_fortran) Malformed("key 'fortran_order' appears twice");
        h.fortran_order = ParseBool();
        seen_fortran = true;
      } else if (key == "shape") {
        if (seen_shape) Malformed("key 'shape' appears twice");
        h.shape = ParseShape();
        seen_shape = true;
      } else {
        Malformed("unexpected key '" + Printable(key) + "'");
      }
      SkipSpace();
      if (Peek() == ',') {
        ++pos_;
      } else if (Peek() != '}') {
        Malformed("expected ',' or '}'");
      }
    }
    ++pos_;  // '}'
    SkipSpace();
    if (pos_ != text_.size()) Malformed("unexpected text after the dictionary");
    if (!seen_descr) Malformed("no 'descr' key");
    if (!seen_fortran) Malformed("no 'fortran_order' key");
    if (!seen_shape) Malformed("no 'shape' key");
    return h;
  }

 private:
  [[noreturn]] void Malformed(const std::string& what) const {
    Fail("'", Printable(path_), "' has a malformed .npy header: ", what, " at offset ", pos_);
  }
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\n' ||
                                   text_[pos_] == '\t' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  void Expect(char c) {
    SkipSpace();
    if (Peek() != c) Malformed(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string ParseString() {
    SkipSpace();
    const char quote = Peek();
    if (quote != '\'' && quote != '"') Malformed("expected a quoted string");
    const size_t end = text_.find(quote, pos_ + 1);
    if (end == std::string_view::npos) Malformed("unterminated string");
    std::string s(text_.substr(pos_ + 1, end - pos_ - 1));
    if (s.find('\\') != std::string::npos) Malformed("escape sequence in a string");
    pos_ = end + 1;
    return s;
  }
  bool ParseBool() {
    if (text_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (text_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    Malformed("'fortran_order' is not True or False");
  }
  int64_t ParseDim() {
    SkipSpace();
    if (Peek() < '0' || Peek() > '9') Malformed("shape entry is not a non-negative integer");
    int64_t v = 0;
    while (Peek() >= '0' && Peek() <= '9') {
      const int digit = Peek() - '0';
      if (v > (std::numeric_limits<int64_t>::max() - digit) / 10) {
        Malformed("shape entry is too large");
      }
      v = v * 10 + digit;
      ++pos_;
    }
    if (Peek() == 'L') ++pos_;  // Python 2 long literal, as old NumPy wrote (3L, 4L)
    return v;
  }
  // "()", "(5,)", "(3, 4)", "(3, 4,)"; "(5)" is an int in Python, so not a shape.
  std::vector<int64_t> ParseShape() {
    Expect('(');
    std::vector<int64_t> dims;
    bool trailing_comma = false;
    SkipSpace();
    while (Peek() != ')') {
      dims.push_back(ParseDim());
      SkipSpace();
      trailing_comma = Peek() == ',';
      if (trailing_comma) {
        ++pos_;
        SkipSpace();
      } else if (Peek() != ')') {
        Malformed("expected ',' or ')' in the shape");
      }
    }
    ++pos_;
    if (dims.size() == 1 && !trailing_comma) Malformed("shape is not a tuple");
    return dims;
  }

  std::string_view text_;
  const std::string& path_;
  size_t pos_ = 0;
};

std::optional<DType> DTypeOfDescr(std::string_view descr) {
  if (descr == "<f4") return DType::kF32;
  if (descr == "<u2") return DType::kBF16;
  if (descr == "|u1" || descr == "<u1") return DType::kU8;
  return std::nullopt;
}

uint32_t LoadLe(const unsigned char* p, int bytes) {
  uint32_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::string HeaderDict(const Tensor& t) {
  std::string shape;
  for (int64_t d : t.shape().dims()) shape += std::to_string(d) + ", ";
  if (t.rank() > 1) shape.resize(shape.size() - 2);  // "(3, 4)" but "(5,)" and "()"
  if (t.rank() == 1) shape.resize(shape.size() - 1);
  return StrCat("{'descr': '", NpyDescr(t.dtype()), "', 'fortran_order': False, 'shape': (", shape,
                "), }");
}

// Magic, version, length field and the padded header text.
std::string EncodeHeader(const Tensor& t) {
  const std::string dict = HeaderDict(t);
  for (int major : {1, 2}) {
    const size_t prefix = kMagicSize + 2 + (major == 1 ? 2 : 4);
    const size_t unpadded = prefix + dict.size() + 1;  // + '\n'
    const size_t padding = (kDataAlignment - unpadded % kDataAlignment) % kDataAlignment;
    const size_t header_len = dict.size() + padding + 1;
    if (major == 1 && header_len > kV1MaxHeaderBytes) continue;
    std::string out(kMagic, kMagicSize);
    out += static_cast<char>(major);
    out += '\0';
    for (int i = 0; i < (major == 1 ? 2 : 4); ++i) {
      out += static_cast<char>((header_len >> (8 * i)) & 0xFF);
    }
    out += dict;
    out.append(padding, ' ');
    out += '\n';
    return out;
  }
  Fail("unreachable");
}

}  // namespace

std::string_view NpyDescr(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "<f4";
    case DType::kBF16:
      return "<u2";
    case DType::kU8:
      return "|u1";
  }
  return "?";
}

Tensor ReadNpy(const std::string& path, MemoryCategory category) {
  const std::string name = Printable(path);
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) Fail("cannot read '", name, "': ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) Fail("cannot read '", name, "': ", std::strerror(errno));
  if (S_ISDIR(st.st_mode)) Fail("cannot read '", name, "': ", std::strerror(EISDIR));
  const bool regular = S_ISREG(st.st_mode);

  unsigned char prefix[12];
  if (ReadUpTo(fd.get(), prefix, 8, path) < 8 || std::memcmp(prefix, kMagic, kMagicSize) != 0) {
    Fail("'", name, "' is not an .npy file (it does not start with \\x93NUMPY)");
  }
  const int major = prefix[6], minor = prefix[7];
  if (major < 1 || major > 3 || minor != 0) {
    Fail("'", name, "' has unsupported .npy format version ", major, ".", minor,
         " (expected 1.0, 2.0 or 3.0)");
  }
  const int len_bytes = major == 1 ? 2 : 4;
  if (ReadUpTo(fd.get(), prefix + 8, len_bytes, path) < static_cast<size_t>(len_bytes)) {
    Fail("'", name, "' is truncated: it ends inside the header length");
  }
  const uint32_t header_len = LoadLe(prefix + 8, len_bytes);
  const int64_t data_offset = 8 + len_bytes + static_cast<int64_t>(header_len);
  if (header_len > kMaxHeaderBytes || (regular && data_offset > st.st_size)) {
    Fail("'", name, "' is truncated or corrupt: its header length ", header_len,
         " exceeds the file");
  }
  std::string text(header_len, '\0');
  if (ReadUpTo(fd.get(), text.data(), header_len, path) < header_len) {
    Fail("'", name, "' is truncated: it ends inside the header");
  }
  const NpyHeader header = HeaderParser(text, path).Parse();
  if (header.fortran_order) {
    Fail("'", name, "' is in Fortran order; only C order is supported");
  }
  const std::optional<DType> dtype = DTypeOfDescr(header.descr);
  if (!dtype) {
    Fail("'", name, "' has unsupported dtype '", Printable(header.descr),
         "' (expected '<f4', '<u2' for bf16 bits, or '|u1')");
  }
  const Shape shape(header.shape);
  // Checked before allocating, so that a header claiming terabytes fails cleanly.
  int64_t data_bytes = static_cast<int64_t>(DTypeSize(*dtype));
  for (int64_t d : header.shape) {
    if (d != 0 && data_bytes > std::numeric_limits<int64_t>::max() / 8 / d) {
      Fail("'", name, "' has shape ", shape.ToString(), ", which is too large");
    }
    data_bytes *= d;
  }
  const auto truncated = [&](int64_t have) {
    Fail("'", name, "' is truncated: shape ", shape.ToString(), " of '", header.descr, "' needs ",
         data_bytes, " data bytes, the file has ", have);
  };
  const auto trailing = [&](int64_t extra) {
    Fail("'", name, "' has ", extra, " bytes after the data of shape ", shape.ToString());
  };
  if (regular) {
    const int64_t have = st.st_size - data_offset;
    if (have < data_bytes) truncated(have);
    if (have > data_bytes) trailing(have - data_bytes);
  }
  Tensor t = Tensor::Empty(*dtype, shape, category);
  const size_t got = ReadUpTo(fd.get(), t.raw(), static_cast<size_t>(data_bytes), path);
  if (got < static_cast<size_t>(data_bytes)) truncated(static_cast<int64_t>(got));
  char extra;
  if (ReadUpTo(fd.get(), &extra, 1, path) != 0) trailing(1);  // a file that grew, or a pipe
  return t;
}

void WriteNpyFiles(const std::vector<std::pair<std::string, const Tensor*>>& files) {
  std::set<std::string> seen;
  for (const auto& [path, tensor] : files) {
    MXTRAIN_CHECK(!path.empty(), "cannot write an .npy file to an empty path");
    MXTRAIN_CHECK(seen.insert(path).second, "cannot write '", Printable(path),
                  "' twice in one set");
    MXTRAIN_CHECK(tensor != nullptr && tensor->defined(), "cannot write '", Printable(path),
                  "': the tensor is undefined");
    CheckNotDirectory(path);
  }
  Temporaries temporaries;
  for (const auto& [path, tensor] : files) {
    std::string tmp;
    Fd fd(CreateTemporary(path, &tmp));
    if (fd.get() < 0) Fail("cannot write '", Printable(path), "': ", std::strerror(errno));
    temporaries.paths().push_back(tmp);
    const std::string header = EncodeHeader(*tensor);
    WriteAll(fd.get(), header.data(), header.size(), path);
    WriteAll(fd.get(), tensor->raw(), tensor->NumBytes(), path);
    if (fd.Close() != 0) Fail("cannot write '", Printable(path), "': ", std::strerror(errno));
  }
  for (const auto& file : files) internal::RenameFront(temporaries, file.first);
}

void WriteNpy(const std::string& path, const Tensor& tensor) { WriteNpyFiles({{path, &tensor}}); }

}  // namespace mxtrain
