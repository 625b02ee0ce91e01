// Training data for the byte-level model (model.h): a built-in corpus the program
// generates, or any file's bytes; a train / validation split; and batches drawn
// deterministically from a seed.
//
// The built-in corpus is English-like text with structure a small model can learn within a
// short run: a fixed "world" of people with homes, jobs, pets and favourite colours stated
// as facts again and again in several phrasings, sentences from a small grammar, and
// arithmetic on small numbers. Its unigram entropy is about 3.0 nats per byte; a model
// that has learned the spelling, the templates and some facts gets well below that.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mxtrain {

// The built-in corpus: `bytes` bytes of text (whole lines), the same on every machine.
std::string BuiltinCorpus(int64_t bytes = int64_t{1} << 19);

struct Corpus {
  std::vector<uint8_t> train;
  std::vector<uint8_t> val;
  std::string source;  // "built-in" or the file's path
};

// Splits text into train (first part) and validation (the last tenth, at least
// context + 1 bytes). Throws Error when either part would be shorter than context + 1
// bytes (the data is smaller than two contexts).
Corpus SplitCorpus(std::string text, int64_t context, std::string source);
// A file's bytes, split as above. Throws Error naming the path when the file is missing,
// unreadable, empty or too small for the context.
Corpus LoadCorpusFile(const std::string& path, int64_t context);

// Entropy of the byte frequencies of `data` in nats (what a model that ignores context
// achieves at best).
double UnigramEntropy(std::span<const uint8_t> data);

// Sequences of context bytes and their next-byte targets.
struct Batch {
  std::vector<int32_t> ids;      // [batch * context]
  std::vector<int32_t> targets;  // [batch * context]
  int64_t batch = 0;
};

// Training batch `micro` of optimizer step `step`: `batch` windows at offsets drawn from
// (seed, step, micro) alone, so a resumed run draws exactly what the uninterrupted one did.
Batch SampleBatch(std::span<const uint8_t> data, int64_t context, int64_t batch, uint64_t seed,
                  int64_t step, int64_t micro);
// Evaluation batch `index` of `count`: `batch` windows spread evenly over the data, the same
// for every seed and run.
Batch EvalBatch(std::span<const uint8_t> data, int64_t context, int64_t batch, int64_t index,
                int64_t count);

}  // namespace mxtrain
