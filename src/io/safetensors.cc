// safetensors reading and writing. The header is parsed by ParseJson (nlohmann/json, strict:
// no duplicate keys, bounded nesting); the checks
// follow the reference implementation's validate() (safetensors/src/tensor.rs), so a file
// this reader accepts is one the Python library accepts too.
#include "mxtrain/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "io/file_util.h"
#include "io/json_util.h"
#include "mxtrain/error.h"

namespace mxtrain {
namespace {

using internal::Json;
using internal::Printable;
using internal::QuotedForMessage;

static_assert(std::endian::native == std::endian::little,
              "the safetensors reader and writer copy little-endian data as is");

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the reference reader's limit
constexpr size_t kHeaderAlignment = 8;             // the buffer starts 8-byte aligned
constexpr char kMetadataKey[] = "__metadata__";

std::optional<DType> DTypeOfName(std::string_view name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "U8") return DType::kU8;
  return std::nullopt;
}

struct Entry {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// Header validation, with every failure "<path>: <problem>".
class HeaderReader {
 public:
  explicit HeaderReader(const std::string& path) : name_(Printable(path)) {}

  [[noreturn]] void Bad(const std::string& what) const { Fail(name_, ": ", what); }

  // The entries sorted by offset; metadata into *metadata.
  std::vector<Entry> Read(std::string_view text, std::map<std::string, std::string>* metadata) {
    if (text.empty() || text[0] != '{') Bad("the header does not start with '{'");
    Json header;
    try {
      header = internal::ParseJson(text);
    } catch (const Error& e) {
      Bad(StrCat("the header is not valid JSON (", e.what(), ")"));
    }
    std::vector<Entry> entries;
    for (auto it = header.begin(); it != header.end(); ++it) {  // an object: text[0] is '{'
      if (it.key() == kMetadataKey) {
        ReadMetadata(it.value(), metadata);
      } else {
        entries.push_back(ReadEntry(it.key(), it.value()));
      }
    }
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    return entries;
  }

 private:
  static std::string Quoted(const std::string& key) { return QuotedForMessage(key); }

  void ReadMetadata(const Json& value, std::map<std::string, std::string>* metadata) const {
    if (!value.is_object()) {
      Bad(StrCat("\"__metadata__\" is not an object of strings but a JSON ", value.type_name()));
    }
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (!it.value().is_string()) {
        Bad(StrCat("metadata ", Quoted(it.key()), " is not a string but a JSON ",
                   it.value().type_name()));
      }
      (*metadata)[it.key()] = it.value().get<std::string>();
    }
  }

  // A non-negative integer that a double holds exactly ("8", also "8.0" or "8e0").
  uint64_t Count(const Json& v, const std::string& what) const {
    const double x = v.is_number() ? v.get<double>() : -1.0;
    if (!(x >= 0 && x <= 9007199254740992.0 && x == std::trunc(x))) {
      Bad(StrCat(what, " is not a non-negative integer"));
    }
    return static_cast<uint64_t>(x);
  }

  Entry ReadEntry(const std::string& key, const Json& value) const {
    const std::string tensor = "tensor " + Quoted(key);
    if (!value.is_object()) {
      Bad(StrCat(tensor, " is not an object but a JSON ", value.type_name()));
    }
    for (auto it = value.begin(); it != value.end(); ++it) {
      if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
        Bad(StrCat(tensor, " has unexpected key ", Quoted(it.key())));
      }
    }
    for (const char* k : {"dtype", "shape", "data_offsets"}) {
      if (!value.contains(k)) Bad(StrCat(tensor, " has no \"", k, "\""));
    }
    Entry e;
    e.name = key;
    const Json& dtype_json = value.at("dtype");
    if (!dtype_json.is_string()) Bad(StrCat(tensor, " has a dtype that is not a string"));
    const std::string& dtype = dtype_json.get_ref<const std::string&>();
    const std::optional<DType> d = DTypeOfName(dtype);
    if (!d) {
      Bad(StrCat(tensor, " has unsupported dtype ", Quoted(dtype),
                 " (expected \"F32\", \"BF16\" or \"U8\")"));
    }
    e.dtype = *d;
    const Json& shape = value.at("shape");
    if (!shape.is_array()) Bad(StrCat(tensor, " has a shape that is not an array"));
    // Element count with overflow checks, so that a header claiming 2^70 bytes fails here.
    uint64_t bytes = DTypeSize(e.dtype);
    for (const Json& dim : shape) {
      const uint64_t n = Count(dim, tensor + " shape entry");
      if (n != 0 && bytes > (static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / 8) / n) {
        Bad(StrCat(tensor, " has a shape that is too large"));
      }
      bytes *= n;
      e.shape.push_back(static_cast<int64_t>(n));
    }
    const Json& offsets = value.at("data_offsets");
    if (!offsets.is_array() || offsets.size() != 2) {
      Bad(StrCat(tensor, " has data_offsets that are not an array [begin, end]"));
    }
    e.begin = Count(offsets[0], tensor + " data_offsets begin");
    e.end = Count(offsets[1], tensor + " data_offsets end");
    if (e.end < e.begin) {
      Bad(StrCat(tensor, " has data_offsets [", e.begin, ", ", e.end,
                 "] that end before they begin"));
    }
    if (e.end - e.begin != bytes) {
      Bad(StrCat(tensor, " of dtype ", dtype, " and shape ", Shape(e.shape).ToString(), " needs ",
                 bytes, " bytes, but its data_offsets [", e.begin, ", ", e.end, "] span ",
                 e.end - e.begin));
    }
    return e;
  }

  std::string name_;
};

uint64_t LoadLe64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

std::string_view SafetensorsDType(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kU8:
      return "U8";
  }
  return "?";
}

SafetensorsFile ReadSafetensors(const std::string& path) {
  HeaderReader reader(path);
  internal::Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) reader.Bad(StrCat("cannot open: ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) reader.Bad(StrCat("cannot stat: ", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) reader.Bad(StrCat("cannot read: ", std::strerror(EISDIR)));
  const bool regular = S_ISREG(st.st_mode);

  unsigned char prefix[8];
  const size_t got_prefix = internal::ReadUpTo(fd.get(), prefix, 8, path);
  if (got_prefix < 8) {
    reader.Bad(StrCat("is truncated: ", got_prefix, " bytes, less than the 8-byte header length"));
  }
  const uint64_t header_len = LoadLe64(prefix);
  if (header_len > kMaxHeaderBytes) {
    reader.Bad(StrCat("header length ", header_len, " exceeds the limit of ", kMaxHeaderBytes,
                      " bytes (a corrupt file?)"));
  }
  if (regular && 8 + header_len > static_cast<uint64_t>(st.st_size)) {
    reader.Bad(StrCat("is truncated or corrupt: header length ", header_len,
                      " runs past the end of the file (", st.st_size, " bytes)"));
  }
  std::string text(header_len, '\0');
  if (internal::ReadUpTo(fd.get(), text.data(), header_len, path) < header_len) {
    reader.Bad("is truncated: it ends inside the header");
  }
  SafetensorsFile file;
  const std::vector<Entry> entries = reader.Read(text, &file.metadata);

  uint64_t end = 0;  // of the data so far
  for (const Entry& e : entries) {
    if (e.begin != end) {
      reader.Bad(StrCat("tensor ", QuotedForMessage(e.name), " has data_offsets [", e.begin, ", ",
                        e.end, "] but the previous tensor ends at ", end,
                        e.begin < end ? " (overlap)" : " (a hole)"));
    }
    end = e.end;
  }
  if (regular) {
    const uint64_t buffer = static_cast<uint64_t>(st.st_size) - 8 - header_len;
    if (end != buffer) {
      reader.Bad(StrCat("the tensors cover ", end, " bytes of data but the file holds ", buffer,
                        end < buffer ? " (bytes after the last tensor)" : " (truncated)"));
    }
  }
  for (const Entry& e : entries) {
    Tensor t = Tensor::Empty(e.dtype, Shape(e.shape));
    const size_t n = static_cast<size_t>(e.end - e.begin);
    if (internal::ReadUpTo(fd.get(), t.raw(), n, path) < n) {
      reader.Bad(StrCat("is truncated inside the data of tensor ", QuotedForMessage(e.name)));
    }
    file.tensors.push_back({e.name, std::move(t)});
  }
  char extra;
  if (internal::ReadUpTo(fd.get(), &extra, 1, path) != 0) {
    reader.Bad("has bytes after the last tensor");  // a file that grew, or a pipe
  }
  return file;
}

void WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string name = Printable(path);
  MXTRAIN_CHECK(!path.empty(), "cannot write a safetensors file to an empty path");
  Json header = Json::object();
  if (!metadata.empty()) {
    Json& meta = header[kMetadataKey] = Json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
  }
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const NamedTensor& nt : tensors) {
    const std::string tensor = "tensor " + QuotedForMessage(nt.name);
    MXTRAIN_CHECK(!nt.name.empty(), "cannot write '", name, "': a tensor has an empty name");
    MXTRAIN_CHECK(nt.name != kMetadataKey, "cannot write '", name,
                  "': \"__metadata__\" is reserved and cannot name a tensor");
    MXTRAIN_CHECK(seen.insert(nt.name).second, "cannot write '", name, "': ", tensor,
                  " appears twice");
    MXTRAIN_CHECK(nt.tensor.defined(), "cannot write '", name, "': ", tensor, " is undefined");
    Json entry = Json::object();  // keys in this order, as the Python library writes them
    entry["dtype"] = SafetensorsDType(nt.tensor.dtype());
    entry["shape"] = nt.tensor.shape().dims();
    const uint64_t begin = offset;
    offset += nt.tensor.NumBytes();
    entry["data_offsets"] = {begin, offset};
    header[nt.name] = std::move(entry);  // appended: names checked distinct
  }
  std::string text;
  try {
    text = internal::DumpJson(header);
  } catch (const Error& e) {
    Fail("cannot write '", name, "': ", e.what());
  }
  text.append((kHeaderAlignment - text.size() % kHeaderAlignment) % kHeaderAlignment, ' ');
  unsigned char prefix[8];
  for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(text.size() >> (8 * i));

  internal::CheckNotDirectory(path);
  internal::Temporaries temporaries;
  std::string tmp;
  internal::Fd fd(internal::CreateTemporary(path, &tmp));
  if (fd.get() < 0) Fail("cannot write '", name, "': ", std::strerror(errno));
  temporaries.paths().push_back(tmp);
  internal::WriteAll(fd.get(), prefix, sizeof(prefix), path);
  internal::WriteAll(fd.get(), text.data(), text.size(), path);
  for (const NamedTensor& nt : tensors) {
    internal::WriteAll(fd.get(), nt.tensor.raw(), nt.tensor.NumBytes(), path);
  }
  internal::SyncAndClose(fd, path);
  internal::RenameFront(temporaries, path);
  internal::SyncDirectoryOf(path);
}

}  // namespace mxtrain
