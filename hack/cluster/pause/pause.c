/* The pod sandbox's only process on the local cluster's real nodes (hack/cluster/real-nodes): it
 * holds the pod's namespaces open, reaps any orphan re-parented to it, and exits 0 when the
 * runtime stops the sandbox (TERM or INT). Built statically so its image needs no libc. */
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int signo) {
  (void)signo;
  _exit(0);
}

static void reap(int signo) {
  (void)signo;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction action;
  memset(&action, 0, sizeof action);
  action.sa_handler = stop;
  sigaction(SIGTERM, &action, NULL);
  sigaction(SIGINT, &action, NULL);
  action.sa_handler = reap;
  action.sa_flags = SA_NOCLDSTOP | SA_RESTART;
  sigaction(SIGCHLD, &action, NULL);
  for (;;) pause();
}
