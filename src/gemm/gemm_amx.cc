// AMX-BF16 GEMM path (filled in below).
#include "gemm/kernels.h"

namespace mxtrain::internal {

bool AmxAvailable() { return false; }

void GemmAmx(const GemmProblem& p, std::vector<uint8_t>& skipped) { GemmPortable(p, skipped); }

}  // namespace mxtrain::internal
