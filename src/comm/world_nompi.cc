// WorldCommunicator in a build without MPI (MXTRAIN_WITH_MPI=OFF, or AUTO without MPI
// found): one process, and an Error rather than N independent runs when a launcher started
// several. mpi.cc replaces this file in builds with MPI.
#include "mxtrain/comm.h"
#include "mxtrain/error.h"

namespace mxtrain {

bool HaveMpi() { return false; }

std::unique_ptr<Communicator> WorldCommunicator() {
  const int launched = LaunchedWorldSize();
  MXTRAIN_CHECK(launched == 1, "mpirun started ", launched,
                " processes but this mxtrain was built without MPI (configure with "
                "-DMXTRAIN_WITH_MPI=ON and install libopenmpi-dev)");
  return MakeSingleProcessCommunicator();
}

}  // namespace mxtrain
