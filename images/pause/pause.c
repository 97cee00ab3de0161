/* The pod sandbox ("pause") container's program, as kubelet's pause image
 * runs it: hold the pod's namespaces open doing nothing, reap any zombie
 * re-parented to it (it is PID 1 when the pod shares its PID namespace),
 * and exit 0 on SIGINT or SIGTERM. Built static (scripts/image pause):
 *   gcc -static -Os -o pause pause.c
 * `pause -v` prints the version and exits. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define VERSION "fcc-1.0"

static void stop(int sig)
{
  (void)sig;
  _exit(0);
}

static void reap(int sig)
{
  int saved = errno;
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
  errno = saved;
}

int main(int argc, char **argv)
{
  if (argc > 1 && (strcmp(argv[1], "-v") == 0 || strcmp(argv[1], "--version") == 0)) {
    printf("pause %s\n", VERSION);
    return 0;
  }
  if (getpid() != 1) {
    /* Not fatal: tests run it outside a PID namespace too. */
    fprintf(stderr, "pause: warning: not PID 1\n");
  }

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = stop;
  if (sigaction(SIGINT, &sa, NULL) < 0 || sigaction(SIGTERM, &sa, NULL) < 0) {
    perror("pause: sigaction");
    return 1;
  }
  sa.sa_handler = reap;
  sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  if (sigaction(SIGCHLD, &sa, NULL) < 0) {
    perror("pause: sigaction");
    return 2;
  }

  for (;;) {
    pause();
  }
  return 42; /* not reached */
}
