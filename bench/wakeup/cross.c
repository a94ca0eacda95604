/* What a wake-up from the other core costs the woken thread (like a response arriving): a
 * writer on core WRITER_CPU writes a byte to a pipe every 200 us, the reader on the calling
 * thread's core blocks in read. Part of bench/wakeup-cost.sh. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static int p[2];
static const int N = 10000;

static double thread_cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_THREAD, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

static void *writer(void *cpu) {
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(*(int *)cpu, &s);
    pthread_setaffinity_np(pthread_self(), sizeof s, &s);
    struct timespec ts = {0, 200000};
    char c = 'x';
    for (int i = 0; i < N; i++) {
        nanosleep(&ts, 0);
        if (write(p[1], &c, 1) != 1) exit(1);
    }
    return 0;
}

int main(int argc, char **argv) {
    int cpu = argc > 1 ? atoi(argv[1]) : 0;
    if (pipe(p)) return 1;
    pthread_t t;
    pthread_create(&t, 0, writer, &cpu);
    double c0 = thread_cpu_s();
    char c;
    for (int i = 0; i < N; i++)
        if (read(p[0], &c, 1) != 1) return 1;
    printf("a wake-up from core %d: %.2f us per wake-up (reader thread)\n", cpu, (thread_cpu_s() - c0) / N * 1e6);
    pthread_join(t, 0);
    return 0;
}
