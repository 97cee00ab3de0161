/* The app-mpich test image's MPI program: each rank prints one line, so a
 * test sees how many ranks an MPI launch (flux run, with Flux's PMI) made
 * and on which hosts. Compiled with Debian's mpicc when the image is built. */
#include <mpi.h>
#include <stdio.h>

int main(int argc, char **argv) {
  int rank = 0, size = 0, len = 0;
  char host[MPI_MAX_PROCESSOR_NAME];
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Get_processor_name(host, &len);
  printf("rank %d of %d on %s\n", rank, size, host);
  fflush(stdout);
  MPI_Finalize();
  return 0;
}
