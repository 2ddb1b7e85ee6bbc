/* The demo's event-driven client/server (built by `cargo xtask demo`).
 *
 *   echo CLIENTS REQUESTS
 * A poll() server on 127.0.0.1 (ephemeral port) serves CLIENTS forked client
 * processes; each sends REQUESTS length-prefixed requests and waits for each
 * reply. Handler functions are separate so function probes show the server's
 * structure: serve -> on_accept / on_readable -> handle_request -> send_reply.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_CONN 64

static int read_full(int fd, void *buf, size_t n) {
    size_t off = 0;
    while (off < n) {
        ssize_t r = recv(fd, (char *)buf + off, n - off, 0);
        if (r <= 0) return -1;
        off += r;
    }
    return 0;
}

__attribute__((noinline)) int send_reply(int fd, const char *body, uint32_t len) {
    uint32_t be = htonl(len);
    if (send(fd, &be, 4, 0) != 4) return -1;
    return send(fd, body, len, 0) == (ssize_t)len ? 0 : -1;
}

__attribute__((noinline)) int handle_request(int fd, char *body, uint32_t len) {
    for (uint32_t i = 0; i < len; i++) body[i] = body[i] >= 'a' && body[i] <= 'z' ? body[i] - 32 : body[i];
    return send_reply(fd, body, len);
}

__attribute__((noinline)) int on_readable(int fd) {
    uint32_t be;
    if (read_full(fd, &be, 4) != 0) return -1;
    uint32_t len = ntohl(be);
    if (len > 65536) return -1;
    char body[65536];
    if (read_full(fd, body, len) != 0) return -1;
    return handle_request(fd, body, len);
}

__attribute__((noinline)) int on_accept(int lfd) {
    return accept(lfd, NULL, NULL);
}

__attribute__((noinline)) void serve(int lfd, int clients) {
    struct pollfd fds[MAX_CONN + 1];
    int n = 1, done = 0;
    fds[0].fd = lfd;
    fds[0].events = POLLIN;
    while (done < clients) {
        if (poll(fds, n, 10000) <= 0) break;
        if (fds[0].revents & POLLIN && n <= MAX_CONN) {
            fds[n].fd = on_accept(lfd);
            fds[n].events = POLLIN;
            n++;
        }
        for (int i = 1; i < n; i++) {
            if (fds[i].fd >= 0 && fds[i].revents & (POLLIN | POLLHUP)) {
                if (on_readable(fds[i].fd) != 0) {
                    close(fds[i].fd);
                    fds[i].fd = -1;
                    done++;
                }
            }
        }
    }
}

__attribute__((noinline)) int client(int port, int requests, int id) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) return 1;
    char msg[64], reply[64];
    for (int i = 0; i < requests; i++) {
        uint32_t len = snprintf(msg, sizeof msg, "hello %d from client %d", i, id);
        uint32_t be = htonl(len);
        send(fd, &be, 4, 0);
        send(fd, msg, len, 0);
        if (read_full(fd, &be, 4) != 0 || read_full(fd, reply, ntohl(be)) != 0) return 1;
        usleep(2000);
    }
    close(fd);
    return 0;
}

int main(int argc, char **argv) {
    int clients = argc > 1 ? atoi(argv[1]) : 3;
    int requests = argc > 2 ? atoi(argv[2]) : 20;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(lfd, (struct sockaddr *)&sa, sizeof sa);
    listen(lfd, 16);
    socklen_t len = sizeof sa;
    getsockname(lfd, (struct sockaddr *)&sa, &len);
    for (int c = 0; c < clients; c++)
        if (fork() == 0) _exit(client(ntohs(sa.sin_port), requests, c));
    serve(lfd, clients);
    int failed = 0, status;
    while (wait(&status) > 0) failed += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    printf("echo: served %d clients x %d requests, %d failed\n", clients, requests, failed);
    return failed != 0;
}
