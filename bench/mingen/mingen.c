/* The least an HTTP/1.1 generator can do, as a floor for Stampede's constant and closed cases
 * (bench/min-generator.sh, docs/performance.md): RATE requests per second in 1 ms ticks over
 * CONNS keep-alive connections to 127.0.0.1:PORT. One epoll set holds a timerfd that fires every
 * millisecond and every socket; at each tick the tick's arrivals go out on idle connections
 * (one send each), and each readable socket is read once (one recv: the target's answers are
 * small and arrive in one segment on loopback). RATE 0 is the closed loop instead: no timer,
 * and each answer's connection sends its next request at once. No tasks, no timers, no
 * histograms, no parsing. Prints the requests sent and answered and the process's CPU per
 * answered request (getrusage). Usage: mingen PORT RATE CONNS SECONDS
 *
 * Two variants, by environment (docs/performance.md), with RATE above 0 only:
 * MINGEN_AT_TICK=1 keeps the sockets out of the epoll set and reads each busy one at the next
 * tick (recvmsg with SO_TIMESTAMPNS, the kernel's receive time, as Stampede's `ticked` does), so
 * only the timer wakes the program; MINGEN_CYCLE=1 sends each tick's requests on the idle
 * connections after the last one used, cycling through all of them, instead of on the
 * lowest-numbered idle ones. */
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* Sends the request on an idle connection and marks it busy; a failed or short send (of a few
 * dozen bytes, on loopback) means the target is gone, and ends the program. */
static void fire(int fd, int *busy, long *sent, const char *req, int reqlen) {
    if (send(fd, req, reqlen, 0) != reqlen) {
        perror("mingen: send");
        exit(1);
    }
    *busy = 1;
    (*sent)++;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: mingen PORT RATE CONNS SECONDS\n");
        return 2;
    }
    int port = atoi(argv[1]), rate = atoi(argv[2]), n = atoi(argv[3]), secs = atoi(argv[4]);
    if (port <= 0 || port > 65535 || rate < 0 || n <= 0 || n > 1000 || secs <= 0) {
        fprintf(stderr, "mingen: bad arguments\n");
        return 2;
    }
    char req[128];
    int reqlen = snprintf(req, sizeof req, "GET / HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\n", port);
    int at_tick = rate > 0 && getenv("MINGEN_AT_TICK") != NULL;
    int cycle = getenv("MINGEN_CYCLE") != NULL, next = 0;
    int ep = epoll_create1(EPOLL_CLOEXEC);
    int *fd = calloc(n, sizeof *fd), *busy = calloc(n, sizeof *busy);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    for (int i = 0; i < n; i++) {
        fd[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (connect(fd[i], (struct sockaddr *)&a, sizeof a) != 0) {
            perror("mingen: connect");
            return 1;
        }
        if (fcntl(fd[i], F_SETFL, fcntl(fd[i], F_GETFL) | O_NONBLOCK) != 0) {
            perror("mingen: fcntl");
            return 1;
        }
        if (at_tick) {
            setsockopt(fd[i], SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
        } else {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u64 = (uint64_t)i};
            epoll_ctl(ep, EPOLL_CTL_ADD, fd[i], &ev);
        }
    }
    long sent = 0, done = 0, backlog = 0;
    int tfd = -1;
    if (rate > 0) {
        tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        struct itimerspec ts = {.it_interval = {0, 1000000}, .it_value = {0, 1000000}};
        timerfd_settime(tfd, 0, &ts, NULL);
        struct epoll_event tev = {.events = EPOLLIN, .data.u64 = UINT64_MAX};
        epoll_ctl(ep, EPOLL_CTL_ADD, tfd, &tev);
    } else {
        for (int i = 0; i < n; i++) fire(fd[i], &busy[i], &sent, req, reqlen);
    }
    double carry = 0, per_tick = rate / 1000.0, t0 = now_s(), c0 = cpu_s();
    char buf[8192];
    struct epoll_event evs[256];
    while (now_s() - t0 < secs) {
        int k = epoll_wait(ep, evs, 256, -1);
        for (int e = 0; e < k; e++) {
            if (evs[e].data.u64 == UINT64_MAX) {
                uint64_t x;
                if (read(tfd, &x, sizeof x) != sizeof x) continue;
                /* The answers to the last tick's requests, with their receive times. */
                for (int i = 0; at_tick && i < n; i++) {
                    if (!busy[i]) continue;
                    char control[64];
                    struct iovec iov = {buf, sizeof buf};
                    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control,
                                        .msg_controllen = sizeof control};
                    if (recvmsg(fd[i], &mh, MSG_DONTWAIT) > 0) {
                        busy[i] = 0;
                        done++;
                    }
                }
                carry += per_tick * (double)x;
                backlog += (long)carry;
                carry -= (long)carry;
                for (int j = 0; j < n && backlog > 0; j++) {
                    int i = cycle ? (next + j) % n : j;
                    if (busy[i]) continue;
                    fire(fd[i], &busy[i], &sent, req, reqlen);
                    backlog--;
                    if (cycle) next = (i + 1) % n;
                }
            } else {
                int i = (int)evs[e].data.u64;
                if (recv(fd[i], buf, sizeof buf, 0) > 0 && busy[i]) {
                    busy[i] = 0;
                    done++;
                    if (rate == 0) fire(fd[i], &busy[i], &sent, req, reqlen);
                }
            }
        }
    }
    double c = cpu_s() - c0;
    printf("mingen: sent %ld answered %ld left %ld cpu %.3f s = %.2f us/request\n", sent, done, backlog, c,
           done ? c / done * 1e6 : 0.0);
    return 0;
}
