// A user's dtrain program as small as it gets: joins the group from the
// launcher's variables (torchrun's, a PyTorchJob's) and allreduces its rank.
// Prints "rank R/W allreduce S"; on an error, one line and exit code 1.
#include <iostream>

#include "dtrain/comm.h"

int main() {
  try {
    dtrain::ProcessGroup pg = dtrain::init_process_group();
    const double sum = dtrain::all_reduce_sum(pg, pg.rank() + 1.0);
    std::cout << "rank " << pg.rank() << "/" << pg.size() << " allreduce " << sum << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}
