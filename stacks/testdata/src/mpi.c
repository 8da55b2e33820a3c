#include <mpi.h>
#include <unistd.h>
__attribute__((noinline)) void sync_grads(void) { MPI_Barrier(MPI_COMM_WORLD); }
__attribute__((noinline)) int next_batch(void) { char b[8]; int p[2]; pipe(p); return read(p[0], b, 8); }
int main(int argc, char **argv) {
  int r; MPI_Init(&argc, &argv); MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (r == 1) next_batch(); else sync_grads();
  MPI_Finalize(); return 0;
}
