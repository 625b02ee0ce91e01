// Expert parallelism's exchange in one process (model.h ExpertWire, train.h): a group of one
// rank exchanges with itself through the same code paths that mpirun runs over several
// (tests/cli_parallel_test.cc has those). Checks:
//  - the high-precision wire equals no exchange at all, bit for bit (losses, every
//    gradient): the exchange moves rows and changes no arithmetic;
//  - the MXFP8 wire leaves the forward and every dgrad bit-identical (rowwise codes are
//    what the layers quantize themselves) and changes only the experts' wgrads, whose
//    token-grouped operands come from the received codes (docs/decisions.md "Expert
//    parallelism"): their SQNR against the unexchanged gradients stays above a stated bound;
//  - the bytes each exchange sends, against their closed form (MXFP8 dispatch: 1 + 1/32
//    bytes per element, 0.516x bf16's);
//  - training with the wire resumes bit for bit, and layouts that cannot work are errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <numeric>

#include "mxtrain/quantize.h"
#include "mxtrain/train/data.h"
#include "mxtrain/train/model.h"
#include "mxtrain/train/train.h"
#include "nn/expert_exchange.h"

namespace mxtrain {
namespace {

ModelConfig TinyModel() {
  ModelConfig m;
  m.d_model = 64;
  m.n_layers = 2;
  m.n_heads = 2;
  m.n_experts = 4;
  m.top_k = 2;
  m.d_ff = 64;
  m.context = 32;
  return m;
}

const Corpus& TinyCorpus() {
  static const Corpus c = SplitCorpus(BuiltinCorpus(40000), 32, "built-in");
  return c;
}

Recipe MakeRecipe(Precision p, RecipeFormats f = RecipeFormats::kE4M3) {
  RecipeOptions o;
  o.precision = p;
  if (p == Precision::kMxfp8) o.formats = f;
  return Recipe::Make(o);
}

struct Step {
  LossParts loss;
  std::vector<std::vector<float>> grads;  // per parameter, main_grad
  std::vector<bool> expert;
  ExpertWireBytes wire;
};

Step RunStep(const Recipe& r, ExpertWire wire) {
  const ModelConfig m = TinyModel();
  const Batch b = SampleBatch(TinyCorpus().train, m.context, 6, 5, 1, 0);
  std::unique_ptr<Communicator> group =
      wire == ExpertWire::kLocal ? nullptr : MakeSingleProcessCommunicator();
  Model model(m, r, 3, 2, ExpertParallel{group.get(), wire});
  for (const auto& p : model.parameters()) p->ZeroMainGrad();
  Step s;
  s.loss = model.ForwardBackward(b.ids, b.targets, b.batch, 1.0f);
  for (size_t i = 0; i < model.parameters().size(); ++i) {
    const Tensor& g = model.parameters()[i]->main_grad();
    s.grads.emplace_back(g.const_data<float>(), g.const_data<float>() + g.NumElements());
    s.expert.push_back(model.is_expert_parameter(i));
  }
  s.wire = model.wire_bytes();
  return s;
}

bool SameBits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(ExpertWire, HighPrecisionWireEqualsNoExchangeBitForBit) {
  for (Precision p : {Precision::kMxfp8, Precision::kBf16}) {
    SCOPED_TRACE(Name(p));
    const Step local = RunStep(MakeRecipe(p), ExpertWire::kLocal);
    const Step hp = RunStep(MakeRecipe(p), ExpertWire::kHighPrecision);
    EXPECT_TRUE(SameBits(local.loss.loss, hp.loss.loss)) << local.loss.loss << " " << hp.loss.loss;
    EXPECT_TRUE(SameBits(local.loss.aux, hp.loss.aux));
    int experts = 0;
    for (size_t i = 0; i < local.grads.size(); ++i) {
      experts += local.expert[i];
      // == on floats: an expert's gradient is added to a zeroed main_grad (0 + -0 is +0)
      // where the GEMM wrote it directly, the one difference the sign of a zero may show.
      EXPECT_EQ(local.grads[i], hp.grads[i]) << "parameter " << i;
    }
    EXPECT_EQ(experts, 2 * 2);  // w13 and w2 of each of the two layers
  }
}

double SqnrDb(const std::vector<float>& ref, const std::vector<float>& got) {
  double signal = 0, noise = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    signal += static_cast<double>(ref[i]) * ref[i];
    noise += (static_cast<double>(got[i]) - ref[i]) * (static_cast<double>(got[i]) - ref[i]);
  }
  return 10 * std::log10(signal / noise);
}

// The bound of the MXFP8 wire's expert weight gradients against the unexchanged ones.
constexpr double kExpertWgradMinSqnrDb = 60.0;

TEST(ExpertWire, Mxfp8WireChangesOnlyTheExpertsWgradWithinTheStatedSqnr) {
  for (RecipeFormats f : {RecipeFormats::kE4M3, RecipeFormats::kHybrid}) {
    SCOPED_TRACE(Name(f));
    const Recipe r = MakeRecipe(Precision::kMxfp8, f);
    const Step local = RunStep(r, ExpertWire::kLocal);
    const Step mx = RunStep(r, ExpertWire::kMxfp8);
    // The forward reads the same rowwise codes: the loss is the same bits.
    EXPECT_TRUE(SameBits(local.loss.loss, mx.loss.loss)) << local.loss.loss << " " << mx.loss.loss;
    for (size_t i = 0; i < local.grads.size(); ++i) {
      if (!local.expert[i]) {
        // Every dgrad reads the same codes, so every dense gradient is the same.
        EXPECT_EQ(local.grads[i], mx.grads[i]) << "dense parameter " << i;
        continue;
      }
      // The wgrad's token-grouped operands are quantized from the received codes. An MXFP8
      // value re-quantized with another block's scale keeps its bits unless it falls into
      // that scale's subnormal range (15+ binades below the block's largest element), so the
      // gradients come out equal or at fp32-rounding distance.
      const double db = local.grads[i] == mx.grads[i] ? 999.0 : SqnrDb(local.grads[i], mx.grads[i]);
      std::printf("%s expert parameter %zu: SQNR %.1f dB\n", std::string(Name(f)).c_str(), i, db);
      EXPECT_GT(db, kExpertWgradMinSqnrDb) << "expert parameter " << i;
    }
  }
}

TEST(ExpertWire, BytesSentMatchTheirClosedForm) {
  const ModelConfig m = TinyModel();
  const int64_t rows = 6 * m.context * m.top_k;  // every token's k assignments
  const int64_t d = m.d_model, layers = m.n_layers;
  const Step mx = RunStep(MakeRecipe(Precision::kMxfp8), ExpertWire::kMxfp8);
  const Step hp = RunStep(MakeRecipe(Precision::kMxfp8), ExpertWire::kHighPrecision);
  // A group of one sends nothing to other ranks; every byte goes to itself.
  EXPECT_EQ(mx.wire.remote(), 0);
  EXPECT_EQ(hp.wire.remote(), 0);
  const int64_t mx_rows = rows * (d + d / 32), bf16_rows = rows * d * 2;
  EXPECT_EQ(mx.wire.self, layers * (mx_rows + bf16_rows + mx_rows + bf16_rows));
  EXPECT_EQ(hp.wire.self, layers * 4 * bf16_rows);
  EXPECT_NEAR(static_cast<double>(mx_rows) / static_cast<double>(bf16_rows), 0.516, 0.001);
}

class ExpertWireTrain : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / StrCat("mxtrain_train_ep_test_", getpid());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }
  static TrainConfig Run(int64_t steps) {
    TrainConfig c;
    c.model = TinyModel();
    c.model.n_layers = 1;
    c.recipe = MakeRecipe(Precision::kMxfp8);
    c.steps = steps;
    c.batch_size = 4;
    c.micro_batches = 2;
    c.eval_every = 3;
    c.eval_batches = 2;
    c.threads = 2;
    c.wire = ExpertWire::kMxfp8;
    return c;
  }
  std::filesystem::path dir_;
};

TEST_F(ExpertWireTrain, ResumesBitForBitAndRefusesAnotherLayout) {
  const TrainResult whole = Train(Run(6), TinyCorpus());
  TrainConfig first = Run(6);
  first.stop_after = 3;
  first.checkpoint_path = Path("ckpt.safetensors");
  Train(first, TinyCorpus());
  TrainConfig rest = Run(6);
  rest.resume_path = first.checkpoint_path;
  const TrainResult resumed = Train(rest, TinyCorpus());
  ASSERT_EQ(resumed.steps.size(), whole.steps.size());
  for (size_t i = 0; i < whole.steps.size(); ++i) {
    EXPECT_TRUE(SameBits(whole.steps[i].train_loss, resumed.steps[i].train_loss)) << i;
    EXPECT_TRUE(SameBits(whole.steps[i].grad_norm, resumed.steps[i].grad_norm)) << i;
  }
  EXPECT_TRUE(SameBits(whole.final_val_loss, resumed.final_val_loss));
  // The same checkpoint into a run without the exchange: another layout, refused.
  TrainConfig other = Run(6);
  other.wire = ExpertWire::kLocal;
  other.resume_path = first.checkpoint_path;
  try {
    Train(other, TinyCorpus());
    FAIL() << "expected an Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("wire=mxfp8"), std::string::npos) << e.what();
  }
}

TEST(ExpertWireLayout, ImpossibleLayoutsAreErrorsNamingThem) {
  const auto expect_error = [](const TrainConfig& c, const std::string& part) {
    try {
      Train(c, TinyCorpus());
      ADD_FAILURE() << "expected an Error containing '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  TrainConfig c;
  c.model = TinyModel();
  c.steps = 1;
  c.recipe = MakeRecipe(Precision::kMxfp8);
  c.expert_parallel = 2;
  c.wire = ExpertWire::kMxfp8;
  expect_error(c, "does not divide the job's 1 process");
  c.expert_parallel = 1;
  c.recipe = MakeRecipe(Precision::kBf16);
  expect_error(c, "needs an MXFP8 recipe");
  c.recipe = MakeRecipe(Precision::kMxfp8);
  c.model.n_experts = 3;
  c.model.top_k = 2;
  c.expert_parallel = 1;
  c.wire = ExpertWire::kLocal;
  c.expert_parallel = 0;
  expect_error(c, "expert_parallel must be >= 1");
  // Without a group the model cannot exchange.
  EXPECT_THROW(Model(TinyModel(), MakeRecipe(Precision::kMxfp8), 1, 1,
                     ExpertParallel{nullptr, ExpertWire::kMxfp8}),
               Error);
}

}  // namespace
}  // namespace mxtrain

namespace mxtrain {
namespace {

// Two ranks or more (tests/CMakeLists.txt runs this under mpirun -n 2; the one-process
// entries leave it out): the exchange itself with uneven splits, and rank 1 sending nothing
// (it still calls every collective, and rank 0 receives nothing from it).
TEST(ExpertExchangeMultiRank, UnevenSplitsRoundTripAndMxfp8RowsAreTheSendersCodes) {
  const std::unique_ptr<Communicator> world = WorldCommunicator();
  ASSERT_EQ(world->size(), 2);
  const int me = world->rank();
  constexpr int64_t kLocal = 2, kCols = 64;
  // Sorted rows per global expert: rank 0 has 3 + 0 for its own experts and 5 + 2 for rank
  // 1's; rank 1 has none.
  const std::vector<int64_t> counts =
      me == 0 ? std::vector<int64_t>{3, 0, 5, 2} : std::vector<int64_t>{0, 0, 0, 0};
  nn::Permutation perm;
  perm.counts = counts;
  const int64_t rows = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  const nn::ExpertRoute route = nn::ExchangeCounts(*world, perm, kLocal);
  EXPECT_EQ(route.send_rows, me == 0 ? (std::vector<int64_t>{3, 7}) : (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(route.recv_rows, me == 0 ? (std::vector<int64_t>{3, 0}) : (std::vector<int64_t>{7, 0}));
  EXPECT_EQ(route.recv_groups[0].ends(),
            me == 0 ? (std::vector<int64_t>{3, 3}) : (std::vector<int64_t>{5, 7}));
  // Rows whose values say where they came from.
  Tensor x = Tensor::Empty(DType::kBF16, {rows, kCols});
  for (int64_t i = 0; i < rows * kCols; ++i) {
    x.mutable_data<uint16_t>()[i] = F32ToBf16(std::ldexp(static_cast<float>(i % 97) - 48, -3));
  }
  nn::WireBytes sent;
  const Tensor there = nn::SendRows(*world, x, route, true, &sent);
  ASSERT_EQ(there.shape()[0], route.recv_total);
  EXPECT_EQ(sent.remote, me == 0 ? 7 * kCols * 2 : 0);
  EXPECT_EQ(sent.local, me == 0 ? 3 * kCols * 2 : 0);
  const Tensor back = nn::SendRows(*world, there, route, false, nullptr);
  ASSERT_EQ(back.NumBytes(), x.NumBytes());
  EXPECT_EQ(std::memcmp(back.raw(), x.raw(), x.NumBytes()), 0) << "round trip";
  // MXFP8 rows: the receiver gets exactly the sender's codes and scales.
  const QuantizeOptions q{.format = ElementFormat::kE4M3};
  const MxTensor local = QuantizeRowwise(x, q);
  const MxTensor got = nn::SendRows(*world, local, route, true, nullptr);
  const MxTensor again = nn::SendRows(*world, got, route, false, nullptr);
  EXPECT_EQ(std::memcmp(again.data().raw(), local.data().raw(), local.data().NumBytes()), 0);
  EXPECT_EQ(std::memcmp(again.scales().raw(), local.scales().raw(), local.scales().NumBytes()), 0);
  if (me == 1) {  // rank 1's rows are rank 0's last seven: compare with its own quantization
    const MxTensor mine = QuantizeRowwise(there, q);
    EXPECT_EQ(std::memcmp(got.data().raw(), mine.data().raw(), mine.data().NumBytes()), 0);
    EXPECT_EQ(std::memcmp(got.scales().raw(), mine.scales().raw(), mine.scales().NumBytes()), 0);
  }
}

}  // namespace
}  // namespace mxtrain
