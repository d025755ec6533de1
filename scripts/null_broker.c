/*
 * A broker that stores nothing: it answers every SEND_MESSAGE(_V2) with SEND_OK at once and
 * every other request with SUCCESS, from one thread on epoll, all the answers to one read in
 * one write. scripts/bench_cpp_client.py --null-broker puts it behind a name server and sends
 * the C++ client's load to it, to measure what the client alone allows on this machine: the
 * ceiling no broker, however fast, could lift.
 *
 * usage: null_broker PORT        (listens on 127.0.0.1 only; 0: a free port; Linux: epoll)
 * prints: listening=<port> once ready. It exits when its parent does.
 *
 * Frames are RocketMQ's remoting frames: a 4-byte length, a 4-byte mark (serialize type in the
 * high byte, header length in the rest), the header (JSON or ROCKETMQ binary), the body. The
 * answer to a send is the header our broker's send lane writes (cluster/remoting/
 * frame_template.py), so the client parses the same bytes it gets from RocketDesk.
 */

#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define READ_SIZE (256 * 1024)
#define FLAG_RESPONSE 1
#define FLAG_ONEWAY 2

typedef struct {
    int fd;
    unsigned char *in;
    size_t used, size;
    char *out;
    size_t out_used, out_size, out_sent;
} conn_t;

static unsigned long long queue_offset;

static void
reserve(char **buffer, size_t *size, size_t need)
{
    if (need <= *size)
        return;
    size_t grown = *size ? *size : 65536;
    while (grown < need)
        grown *= 2;
    char *moved = realloc(*buffer, grown);
    if (moved == NULL) {
        perror("realloc");
        exit(1);
    }
    *buffer = moved;
    *size = grown;
}

/* The number after "key": in a JSON header, or -1. */
static long long
json_number(const char *header, size_t length, const char *key)
{
    size_t key_length = strlen(key);
    for (size_t i = 0; i + key_length < length; i++) {
        if (memcmp(header + i, key, key_length) == 0) {
            long long value = 0;
            int negative = 0;
            size_t j = i + key_length;
            while (j < length && (header[j] == ' ' || header[j] == '\t'))
                j++;
            if (j < length && header[j] == '-') {
                negative = 1;
                j++;
            }
            for (int digits = 0; j < length && header[j] >= '0' && header[j] <= '9'; digits++) {
                if (digits == 18)
                    return -1; /* (no field of a request header is that long) */
                value = value * 10 + (header[j++] - '0');
            }
            return negative ? -value : value;
        }
    }
    return -1;
}

static void
answer(conn_t *c, int code, long long opaque)
{
    char header[512];
    int length;
    if (code == 310 || code == 10)
        length = snprintf(header, sizeof header,
                          "{\"code\":0,\"extFields\":{\"msgId\":\"7F00000100002A9F%016llX\","
                          "\"queueId\":\"0\",\"queueOffset\":\"%llu\",\"MSG_REGION\":"
                          "\"DefaultRegion\",\"TRACE_ON\":\"false\"},\"flag\":1,\"language\":"
                          "\"JAVA\",\"opaque\":%lld,\"serializeTypeCurrentRPC\":\"JSON\","
                          "\"version\":407}",
                          queue_offset * 1203, queue_offset, opaque);
    else
        length = snprintf(header, sizeof header,
                          "{\"code\":0,\"flag\":1,\"language\":\"JAVA\",\"opaque\":%lld,"
                          "\"serializeTypeCurrentRPC\":\"JSON\",\"version\":407}",
                          opaque);
    queue_offset++;
    reserve(&c->out, &c->out_size, c->out_used + 8 + (size_t)length);
    unsigned char *p = (unsigned char *)c->out + c->out_used;
    unsigned total = 4 + (unsigned)length, mark = (unsigned)length;
    p[0] = total >> 24; p[1] = total >> 16; p[2] = total >> 8; p[3] = total;
    p[4] = mark >> 24; p[5] = mark >> 16; p[6] = mark >> 8; p[7] = mark;
    memcpy(p + 8, header, (size_t)length);
    c->out_used += 8 + (size_t)length;
}

/* Answer every whole frame in the buffer; -1 on a frame that makes no sense. */
static int
handle_frames(conn_t *c)
{
    size_t pos = 0;
    while (c->used - pos >= 8) {
        const unsigned char *f = c->in + pos;
        size_t total = ((size_t)f[0] << 24) | ((size_t)f[1] << 16) | ((size_t)f[2] << 8) | f[3];
        size_t header_length = ((size_t)f[5] << 16) | ((size_t)f[6] << 8) | f[7];
        if (total < 4 + header_length || total > (64u << 20))
            return -1;
        if (c->used - pos < 4 + total)
            break;
        const unsigned char *header = f + 8;
        long long code, opaque, flag;
        if (f[4] == 1) { /* ROCKETMQ binary: code, language, version, opaque, flag */
            if (header_length < 13)
                return -1;
            code = (header[0] << 8) | header[1];
            opaque = (long long)(int)(((unsigned)header[5] << 24) | (header[6] << 16)
                                      | (header[7] << 8) | header[8]);
            flag = ((long long)header[9] << 24) | (header[10] << 16) | (header[11] << 8)
                   | header[12];
        } else {
            code = json_number((const char *)header, header_length, "\"code\":");
            opaque = json_number((const char *)header, header_length, "\"opaque\":");
            flag = json_number((const char *)header, header_length, "\"flag\":");
        }
        if (flag >= 0 && !(flag & (FLAG_RESPONSE | FLAG_ONEWAY)))
            answer(c, (int)code, opaque);
        pos += 4 + total;
    }
    memmove(c->in, c->in + pos, c->used - pos);
    c->used -= pos;
    return 0;
}

/* Write what is waiting; 1 when some is left (the peer's window is full), -1 on an error. */
static int
flush_out(conn_t *c)
{
    while (c->out_sent < c->out_used) {
        ssize_t n = write(c->fd, c->out + c->out_sent, c->out_used - c->out_sent);
        if (n > 0)
            c->out_sent += (size_t)n;
        else if (n < 0 && errno == EINTR)
            continue;
        else if (n < 0 && errno == EAGAIN)
            return 1;
        else
            return -1;
    }
    c->out_used = c->out_sent = 0;
    return 0;
}

/* Watch for reading while answers can leave, for writing while they wait. */
static int
watch(int epoll_fd, conn_t *c, int waiting)
{
    struct epoll_event event = {.events = waiting ? EPOLLOUT : EPOLLIN, .data.ptr = c};
    return epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c->fd, &event);
}

static void
drop(int epoll_fd, conn_t *c)
{
    epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c);
}

int
main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: null_broker PORT\n");
        return 2;
    }
    prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the benchmark that started it */
    if (getppid() == 1)
        return 1;
    signal(SIGPIPE, SIG_IGN); /* a peer gone before its answers: an error on that socket */
    int listener = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    if (listener < 0) {
        perror("socket");
        return 1;
    }
    int one = 1;
    setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in address = {0};
    address.sin_family = AF_INET;
    address.sin_port = htons((unsigned short)atoi(argv[1]));
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t bound = sizeof address;
    if (bind(listener, (struct sockaddr *)&address, sizeof address) < 0 || listen(listener, 128) < 0
        || getsockname(listener, (struct sockaddr *)&address, &bound) < 0) {
        perror("bind/listen");
        return 1;
    }
    int epoll_fd = epoll_create1(0);
    struct epoll_event event = {.events = EPOLLIN, .data.ptr = NULL};
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listener, &event);
    printf("listening=%u\n", (unsigned)ntohs(address.sin_port));
    fflush(stdout);
    struct epoll_event ready[64];
    for (;;) {
        int n = epoll_wait(epoll_fd, ready, 64, -1);
        for (int i = 0; i < n; i++) {
            conn_t *c = ready[i].data.ptr;
            if (c == NULL) {
                int fd = accept4(listener, NULL, NULL, SOCK_NONBLOCK);
                if (fd < 0)
                    continue;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                conn_t *made = calloc(1, sizeof *made);
                struct epoll_event watch_in = {.events = EPOLLIN, .data.ptr = made};
                if (made == NULL || epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &watch_in) < 0) {
                    close(fd);
                    free(made);
                    continue;
                }
                made->fd = fd;
                continue;
            }
            if (c->out_used) { /* writable again: the answers that waited, then read again */
                int left = flush_out(c);
                if (left < 0 || (left == 0 && watch(epoll_fd, c, 0) < 0))
                    drop(epoll_fd, c);
                continue;
            }
            reserve((char **)&c->in, &c->size, c->used + READ_SIZE);
            ssize_t got = read(c->fd, c->in + c->used, READ_SIZE);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                drop(epoll_fd, c);
                continue;
            }
            if (got < 0)
                continue;
            c->used += (size_t)got;
            if (handle_frames(c) < 0) {
                drop(epoll_fd, c);
                continue;
            }
            /* Answers the peer does not take yet wait, and this peer is not read meanwhile
             * (the others are served as before). */
            int left = flush_out(c);
            if (left < 0 || (left > 0 && watch(epoll_fd, c, 1) < 0))
                drop(epoll_fd, c);
        }
    }
}
