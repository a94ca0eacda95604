/* The pod sandbox process of the Stampede test cluster: sleep until SIGINT/SIGTERM, reap adopted children. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_stop(int sig) {
  (void)sig;
  _exit(0);
}

static void on_child(int sig) {
  (void)sig;
  while (waitpid(-1, 0, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop = {0};
  stop.sa_handler = on_stop;
  sigaction(SIGINT, &stop, 0);
  sigaction(SIGTERM, &stop, 0);
  struct sigaction child = {0};
  child.sa_handler = on_child;
  child.sa_flags = SA_NOCLDSTOP;
  sigaction(SIGCHLD, &child, 0);
  for (;;) pause();
}
