#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
static int fd;
void *waiter(void *a) { for(;;) pause(); return 0; }
__attribute__((noinline)) int read_input(char *buf, int n) { return read(fd, buf, n); }
int main(int argc, char **argv) {
  pthread_t th; char buf[64];
  if (argc > 1) pthread_create(&th, 0, waiter, 0);
  fd = 0;
  for(;;) { int n = read_input(buf, sizeof buf); if (n <= 0) return 0; write(1, buf, n); }
}
