// The built-in corpus, file loading, the split and batch sampling (data.h).
#include "mxtrain/train/data.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "mxtrain/error.h"
#include "train/rng.h"

namespace mxtrain {

namespace {

constexpr const char* kNames[] = {
    "alice", "bob",    "carol", "dave",   "erin",  "frank", "grace", "heidi", "ivan", "judy",
    "karl",  "laura",  "mike",  "nina",   "oscar", "peggy", "quinn", "rita",  "sam",  "tina",
    "uma",   "victor", "wendy", "xavier", "yara",  "zack",  "olga",  "pablo", "rosa", "theo"};
constexpr const char* kCities[] = {"paris", "london", "tokyo",  "cairo", "lima",  "oslo",
                                   "rome",  "berlin", "madrid", "delhi", "seoul", "quito"};
constexpr const char* kJobs[] = {"baker",  "doctor", "farmer", "pilot",  "teacher", "painter",
                                 "singer", "lawyer", "nurse",  "tailor", "miner",   "writer"};
constexpr const char* kPets[] = {"cat",    "dog",  "parrot", "horse",
                                 "rabbit", "goat", "fish",   "turtle"};
constexpr const char* kColors[] = {"red",    "blue",   "green", "yellow",
                                   "purple", "orange", "white", "black"};
constexpr const char* kAdjectives[] = {"small",  "old",   "happy", "quiet",  "brave",
                                       "clever", "tired", "young", "gentle", "lazy"};
constexpr const char* kNouns[] = {"boy",   "girl", "king", "queen",  "farmer",
                                  "child", "bird", "wolf", "sailor", "teacher"};
constexpr const char* kVerbs[] = {"sees",  "helps", "follows", "finds",
                                  "calls", "meets", "knows",   "likes"};
constexpr const char* kPlaces[] = {"the river",  "the market", "the forest", "the school",
                                   "the castle", "the garden", "the harbor", "the hill"};
constexpr const char* kNumberWords[] = {"zero",    "one",     "two",       "three",    "four",
                                        "five",    "six",     "seven",     "eight",    "nine",
                                        "ten",     "eleven",  "twelve",    "thirteen", "fourteen",
                                        "fifteen", "sixteen", "seventeen", "eighteen"};

template <typename T, size_t N>
const char* Pick(internal::Rng& rng, T (&list)[N]) {
  return list[rng.Below(N)];
}

// One line of the corpus.
std::string Line(internal::Rng& rng) {
  constexpr size_t kPeople = std::size(kNames);
  const size_t who = rng.Below(kPeople);
  // Each person's facts are fixed by their index: the model can learn them.
  const char* name = kNames[who];
  const char* city = kCities[(who * 7 + 3) % std::size(kCities)];
  const char* job = kJobs[(who * 5 + 1) % std::size(kJobs)];
  const char* pet = kPets[(who * 3 + 2) % std::size(kPets)];
  const char* color = kColors[(who * 11 + 5) % std::size(kColors)];
  switch (rng.Below(10)) {
    case 0:
      return StrCat(name, " lives in ", city, ".");
    case 1:
      return StrCat(name, " works as a ", job, " in ", city, ".");
    case 2:
      return StrCat("the ", pet, " of ", name, " is ", color, ".");
    case 3:
      return StrCat("where does ", name, " live? ", name, " lives in ", city, ".");
    case 4:
      return StrCat(name, " is a ", job, " and has a ", color, " ", pet, ".");
    case 5:
    case 6:
      return StrCat("the ", Pick(rng, kAdjectives), " ", Pick(rng, kNouns), " ", Pick(rng, kVerbs),
                    " the ", Pick(rng, kAdjectives), " ", Pick(rng, kNouns), " near ",
                    Pick(rng, kPlaces), ".");
    case 7: {
      const uint64_t a = rng.Below(10), b = rng.Below(9);
      return StrCat(kNumberWords[a], " plus ", kNumberWords[b], " is ", kNumberWords[a + b], ".");
    }
    case 8: {
      const uint64_t a = rng.Below(50), b = rng.Below(50);
      return StrCat(a, " + ", b, " = ", a + b, ".");
    }
    default:
      return StrCat("every morning ", name, " walks the ", pet, " to ", Pick(rng, kPlaces), ".");
  }
}

}  // namespace

std::string BuiltinCorpus(int64_t bytes) {
  internal::Rng rng(20240601, 1);
  std::string text;
  text.reserve(static_cast<size_t>(bytes) + 128);
  while (static_cast<int64_t>(text.size()) < bytes) {
    text += Line(rng);
    text += '\n';
  }
  return text;
}

Corpus SplitCorpus(std::string text, int64_t context, std::string source) {
  const int64_t n = static_cast<int64_t>(text.size());
  const int64_t need = context + 1;
  const int64_t val = std::max(need, n / 10);
  MXTRAIN_CHECK(n - val >= need, source, " has ", n, " bytes, too few for a context of ", context,
                ": training and validation need at least ", need, " bytes each (", 2 * need,
                " in all)");
  Corpus c;
  c.train.assign(text.begin(), text.end() - val);
  c.val.assign(text.end() - val, text.end());
  c.source = std::move(source);
  return c;
}

Corpus LoadCorpusFile(const std::string& path, int64_t context) {
  std::error_code ec;
  MXTRAIN_CHECK(std::filesystem::exists(path, ec), "data file '", path, "' does not exist");
  MXTRAIN_CHECK(!std::filesystem::is_directory(path, ec), "data file '", path, "' is a directory");
  std::ifstream in(path, std::ios::binary);
  MXTRAIN_CHECK(in.good(), "cannot read data file '", path, "'");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MXTRAIN_CHECK(!in.bad(), "cannot read data file '", path, "'");
  MXTRAIN_CHECK(!text.empty(), "data file '", path, "' is empty");
  return SplitCorpus(std::move(text), context, StrCat("data file '", path, "'"));
}

double UnigramEntropy(std::span<const uint8_t> data) {
  if (data.empty()) return 0;
  int64_t counts[256] = {};
  for (uint8_t b : data) ++counts[b];
  double h = 0;
  const double n = static_cast<double>(data.size());
  for (int64_t c : counts) {
    if (c > 0) h -= (static_cast<double>(c) / n) * std::log(static_cast<double>(c) / n);
  }
  return h;
}

namespace {

void FillWindow(std::span<const uint8_t> data, int64_t context, int64_t offset, int64_t row,
                Batch& b) {
  for (int64_t t = 0; t < context; ++t) {
    b.ids[row * context + t] = data[offset + t];
    b.targets[row * context + t] = data[offset + t + 1];
  }
}

// A batch of `batch` rows of `context` to fill, and the number of windows `data` holds
// (throws Error when it holds none).
Batch EmptyBatch(std::span<const uint8_t> data, int64_t context, int64_t batch, int64_t* windows) {
  *windows = static_cast<int64_t>(data.size()) - context;
  MXTRAIN_CHECK(*windows >= 1, "data of ", data.size(), " bytes is too small for a context of ",
                context);
  Batch b;
  b.batch = batch;
  b.ids.resize(static_cast<size_t>(batch * context));
  b.targets.resize(b.ids.size());
  return b;
}

}  // namespace

Batch SampleBatch(std::span<const uint8_t> data, int64_t context, int64_t batch, uint64_t seed,
                  int64_t step, int64_t micro) {
  int64_t windows = 0;
  Batch b = EmptyBatch(data, context, batch, &windows);
  internal::Rng rng(seed, static_cast<uint64_t>(step) * 1024 + static_cast<uint64_t>(micro));
  for (int64_t r = 0; r < batch; ++r) {
    FillWindow(data, context, static_cast<int64_t>(rng.Below(static_cast<uint64_t>(windows))), r,
               b);
  }
  return b;
}

Batch EvalBatch(std::span<const uint8_t> data, int64_t context, int64_t batch, int64_t index,
                int64_t count) {
  int64_t windows = 0;
  Batch b = EmptyBatch(data, context, batch, &windows);
  const int64_t total = batch * count;
  for (int64_t r = 0; r < batch; ++r) {
    const int64_t j = index * batch + r;
    FillWindow(data, context, total > 1 ? j * (windows - 1) / (total - 1) : 0, r, b);
  }
  return b;
}

}  // namespace mxtrain
