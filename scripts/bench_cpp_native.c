/*
 * Send load with the official RocketMQ C++ client core from native threads: no Python between
 * the threads and the client (scripts/bench_cpp_client.py --native builds and runs this).
 *
 * Through the Python binding (ctypes) every send also costs the calling thread the
 * interpreter lock to make the message, call in and read the result; with 32 threads that
 * lock, not the client or the broker, set the pace. Here each thread calls the client's C API
 * (CProducer.h, CMessage.h, declared below as librocketmq.so exports them) in a loop.
 *
 * usage: bench_cpp_native NAMESRV TOPIC THREADS BODY_SIZE WARMUP_S DURATION_S
 * prints: counting (when the clock starts), then sent=<n> failed=<n> seconds=<s>
 */

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct CProducer CProducer;
typedef struct CMessage CMessage;
typedef struct {
    int sendStatus;
    char msgId[256];
    long long offset;
} CSendResult;

extern CProducer *CreateProducer(const char *group);
extern int SetProducerNameServerAddress(CProducer *producer, const char *address);
extern int SetProducerSendMsgTimeout(CProducer *producer, int timeout_ms);
extern int StartProducer(CProducer *producer);
extern int ShutdownProducer(CProducer *producer);
extern int DestroyProducer(CProducer *producer);
extern CMessage *CreateMessage(const char *topic);
extern int SetByteMessageBody(CMessage *msg, const char *body, int length);
extern int DestroyMessage(CMessage *msg);
extern int SendMessageSync(CProducer *producer, CMessage *msg, CSendResult *result);

static CProducer *producer;
static const char *topic;
static char *body;
static int body_size;
static volatile int counting, stopping;
static long long sent, failed;
static pthread_mutex_t totals = PTHREAD_MUTEX_INITIALIZER;

static double
now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *
sender(void *unused)
{
    (void)unused;
    long long ok = 0, bad = 0;
    while (!__atomic_load_n(&stopping, __ATOMIC_RELAXED)) {
        CMessage *msg = CreateMessage(topic);
        SetByteMessageBody(msg, body, body_size);
        CSendResult result;
        int rc = SendMessageSync(producer, msg, &result);
        DestroyMessage(msg);
        if (__atomic_load_n(&counting, __ATOMIC_RELAXED)) {
            if (rc == 0 && result.sendStatus == 0)
                ok++;
            else
                bad++;
        }
    }
    pthread_mutex_lock(&totals);
    sent += ok;
    failed += bad;
    pthread_mutex_unlock(&totals);
    return NULL;
}

int
main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: %s NAMESRV TOPIC THREADS BODY_SIZE WARMUP_S DURATION_S\n", argv[0]);
        return 2;
    }
    topic = argv[2];
    int threads = atoi(argv[3]);
    body_size = atoi(argv[4]);
    double warmup = atof(argv[5]), duration = atof(argv[6]);
    if (threads < 1 || body_size < 1 || duration <= 0) {
        fprintf(stderr, "threads and body size must be positive, duration above 0\n");
        return 2;
    }
    body = malloc((size_t)body_size);
    memset(body, 'x', (size_t)body_size);
    producer = CreateProducer("bench-cpp-native-producer");
    SetProducerNameServerAddress(producer, argv[1]);
    SetProducerSendMsgTimeout(producer, 5000);
    if (StartProducer(producer) != 0) {
        fprintf(stderr, "the producer did not start\n");
        return 1;
    }
    /* One send first: the route is fetched (and the topic auto-created) before the clock. */
    CMessage *first = CreateMessage(topic);
    SetByteMessageBody(first, body, body_size);
    CSendResult result;
    SendMessageSync(producer, first, &result);
    DestroyMessage(first);
    pthread_t *ids = calloc((size_t)threads, sizeof *ids);
    for (int i = 0; i < threads; i++)
        pthread_create(&ids[i], NULL, sender, NULL);
    struct timespec pause = {(time_t)warmup, (long)((warmup - (double)(long)warmup) * 1e9)};
    nanosleep(&pause, NULL);
    __atomic_store_n(&counting, 1, __ATOMIC_RELAXED);
    double began = now();
    printf("counting\n"); /* (the caller times the processes' CPU from here) */
    fflush(stdout);
    struct timespec run = {(time_t)duration, (long)((duration - (double)(long)duration) * 1e9)};
    nanosleep(&run, NULL);
    __atomic_store_n(&counting, 0, __ATOMIC_RELAXED);
    double seconds = now() - began;
    __atomic_store_n(&stopping, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < threads; i++)
        pthread_join(ids[i], NULL);
    printf("sent=%lld failed=%lld seconds=%.3f\n", sent, failed, seconds);
    fflush(stdout);
    ShutdownProducer(producer);
    DestroyProducer(producer);
    free(ids);
    free(body);
    return 0;
}
