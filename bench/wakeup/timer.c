/* What a timer wake-up and a timer reprogram cost the woken thread on this machine
 * (getrusage of the process; one thread). Part of bench/wakeup-cost.sh. */
#include <stdint.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return r.ru_utime.tv_sec + r.ru_stime.tv_sec + (r.ru_utime.tv_usec + r.ru_stime.tv_usec) / 1e6;
}

int main(void) {
    int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK);
    struct itimerspec its = {0};
    int n = 200000;
    double c0 = cpu_s();
    for (int i = 0; i < n; i++) { /* alternately near and far: each call reprograms the CPU's timer */
        its.it_value.tv_nsec = (i & 1) ? 100000 : 900000;
        timerfd_settime(fd, 0, &its, 0);
    }
    printf("timerfd_settime, the CPU's next timer: %.2f us\n", (cpu_s() - c0) / n * 1e6);
    c0 = cpu_s();
    for (int i = 0; i < n; i++) { /* far behind another timer: no reprogram */
        its.it_value.tv_sec = 5;
        its.it_value.tv_nsec = i;
        timerfd_settime(fd, 0, &its, 0);
    }
    printf("timerfd_settime, not the next timer: %.2f us\n", (cpu_s() - c0) / n * 1e6);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN};
    epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev);
    n = 5000;
    uint64_t expiries;
    its.it_value.tv_sec = 0;
    its.it_value.tv_nsec = 200000;
    c0 = cpu_s();
    for (int i = 0; i < n; i++) {
        timerfd_settime(fd, 0, &its, 0);
        epoll_wait(ep, &ev, 1, -1);
        if (read(fd, &expiries, 8) != 8) return 1;
    }
    printf("timerfd in epoll_wait, 200 us apart: %.2f us per wake-up\n", (cpu_s() - c0) / n * 1e6);
    struct timespec ts = {0, 200000};
    c0 = cpu_s();
    for (int i = 0; i < n; i++) nanosleep(&ts, 0);
    printf("nanosleep, 200 us apart: %.2f us per wake-up\n", (cpu_s() - c0) / n * 1e6);
    return 0;
}
