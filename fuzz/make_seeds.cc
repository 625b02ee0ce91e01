// Writes the seed corpora of the fuzz targets into DIR/<target>/: valid inputs like the
// unit tests' (npy_test, safetensors_test, json_test, cli_test), so that the fuzzer starts
// from every branch a well-formed input takes.  Usage: make_seeds DIR
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "mxtrain/npy.h"
#include "mxtrain/safetensors.h"
#include "seed_model.h"

namespace {

using namespace mxtrain;

void Text(const std::filesystem::path& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir / name, std::ios::binary) << text;
}

Tensor Filled(DType dtype, Shape shape) {
  Tensor t = Tensor::Zeros(dtype, std::move(shape));
  auto* p = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.NumBytes(); ++i) p[i] = static_cast<unsigned char>(i * 37 + 11);
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds DIR\n");
    return 2;
  }
  const std::filesystem::path root = argv[1];
  for (const char* t : {"npy", "safetensors", "json", "cli_args"}) {
    std::filesystem::create_directories(root / t);
  }
  // .npy: each dtype, ranks 0 to 3, an empty array.
  const std::vector<std::pair<std::string, Tensor>> arrays = {
      {"f32_2x3.npy", Filled(DType::kF32, Shape{2, 3})},
      {"bf16_5.npy", Filled(DType::kBF16, Shape{5})},
      {"u8_scalar.npy", Filled(DType::kU8, Shape{})},
      {"f32_2x0x4.npy", Filled(DType::kF32, Shape{2, 0, 4})},
      {"u8_3x33.npy", Filled(DType::kU8, Shape{3, 33})}};
  for (const auto& [name, t] : arrays) WriteNpy((root / "npy" / name).string(), t);

  // safetensors: a plain file with metadata, and a valid checkpoint of the seed model.
  WriteSafetensors((root / "safetensors" / "plain.safetensors").string(),
                   {{"a", Filled(DType::kF32, Shape{2, 2})},
                    {"b", Filled(DType::kBF16, Shape{3})},
                    {"c", Filled(DType::kU8, Shape{})}},
                   {{"note", "seed"}});
  std::vector<NamedTensor> ckpt;
  for (const auto& p : fuzz::SeedParams()) {
    for (const char* prefix : {"param/", "adam.m/", "adam.v/"}) {
      ckpt.push_back({prefix + p.name, Filled(DType::kF32, p.shape)});
    }
  }
  std::map<std::string, std::string> meta = fuzz::SeedConfig().ToMetadata();
  meta["format"] = "mxtrain-checkpoint-1";
  meta["train.step"] = "7";
  WriteSafetensors((root / "safetensors" / "checkpoint.safetensors").string(), ckpt, meta);

  // JSON: every type, escapes, nesting, numbers at the edges (json_test's cases).
  const std::vector<std::string> texts = {
      R"( {"n": null, "t": true, "f": false, "i": -12, "d": 2.5e-3, "s": "hi", "a": [1, [2], {}], "o": {"k": []}} )",
      R"("tab\t nl\n quote\" slash\/ back\\ u\u00e9 pair\ud83d\ude00")",
      R"([0, -0, 1e308, -1e-308, 9007199254740993, 0.1, 123456789012345678901234567890])",
      R"({"__metadata__": {"k": "v"}, "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})",
      "[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]",
      "\"\"",
      "{}",
      "true"};
  for (size_t i = 0; i < texts.size(); ++i) {
    Text(root / "json", "seed" + std::to_string(i) + ".json", texts[i]);
  }

  // CLI arguments, one per line (cli_test's flags and values).
  const std::vector<std::string> argvs = {
      "--group-list\n31,0,45,24\n--group-list-type\ncounts\n--m\n100",
      "--group-list=32,32,96\n--m=96",
      "--shape\n4096x1024\n--threads\n2",
      "--lr\n3e-3\nin.npy",
      "--verbose\n--\n--shape",
      "--group-list\n -1, 2 ,3\n--group-list-type\ncumsum\n--m\n3",
      "--help"};
  for (size_t i = 0; i < argvs.size(); ++i) {
    Text(root / "cli_args", "seed" + std::to_string(i) + ".txt", argvs[i]);
  }
  return 0;
}
