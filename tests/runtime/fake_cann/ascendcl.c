/* A fake libascendcl.so with CANN 8.1's C interface (acl.h, acl_rt.h) and its rules that matter
 * to a caller: aclInit once per process (100002 on the second call), a device context that
 * aclrtSetDevice binds to the calling thread only, memory and stream calls that fail with
 * 107002 in a thread without a current context, streams used only under their own context
 * (107003). Device memory is host memory. Lifecycle calls are logged to $FAKE_ACL_LOG. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fake_acl.h"

enum {
    ACL_SUCCESS = 0,
    ACL_ERROR_INVALID_PARAM = 100000,
    ACL_ERROR_UNINITIALIZE = 100001,
    ACL_ERROR_REPEAT_INITIALIZE = 100002,
    ACL_ERROR_REPEAT_FINALIZE = 100037,
    ACL_ERROR_RT_CONTEXT_NULL = 107002,
    ACL_ERROR_RT_STREAM_CONTEXT = 107003,
    ACL_ERROR_RT_INVALID_HANDLE = 107017,
};

#define MAX_DEVICES 8

typedef struct Context {
    int device;
    int live;
    long streams;
} Context;

typedef struct Task {
    void (*fn)(void *);
    void *arg;
    struct Task *next;
} Task;

typedef struct Stream {
    Context *ctx;
    Task *head;
    Task *tail;
} Stream;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int initialized;
static Context contexts[MAX_DEVICES];
static long live_streams;
static long live_allocations;
static __thread Context *current;
static __thread char recent_error[256];

void fake_log(const char *fmt, ...)
{
    const char *path = getenv("FAKE_ACL_LOG");
    if (path == NULL) {
        return;
    }
    pthread_mutex_lock(&log_lock);
    FILE *f = fopen(path, "a");
    if (f != NULL) {
        fprintf(f, "%ld ", (long)syscall(SYS_gettid));
        va_list ap;
        va_start(ap, fmt);
        vfprintf(f, fmt, ap);
        va_end(ap);
        fputc('\n', f);
        fclose(f);
    }
    pthread_mutex_unlock(&log_lock);
}

void fake_set_error(const char *msg)
{
    snprintf(recent_error, sizeof recent_error, "%s", msg);
}

static int fail(int status, const char *msg)
{
    fake_set_error(msg);
    return status;
}

static int need_context(void)
{
    if (current == NULL || !current->live) {
        return fail(ACL_ERROR_RT_CONTEXT_NULL, "no current context in this thread");
    }
    return ACL_SUCCESS;
}

static int in_context(const Stream *s)
{
    int status = need_context();
    if (status != ACL_SUCCESS) {
        return status;
    }
    if (s == NULL) {
        return fail(ACL_ERROR_INVALID_PARAM, "stream is nullptr");
    }
    if (s->ctx != current) {
        return fail(ACL_ERROR_RT_STREAM_CONTEXT, "stream not in current context");
    }
    return ACL_SUCCESS;
}

const char *aclGetRecentErrMsg(void)
{
    return recent_error;
}

int aclInit(const char *configPath)
{
    (void)configPath;
    pthread_mutex_lock(&lock);
    int status = initialized ? ACL_ERROR_REPEAT_INITIALIZE : ACL_SUCCESS;
    initialized = 1;
    pthread_mutex_unlock(&lock);
    fake_log("aclInit -> %d", status);
    return status == ACL_SUCCESS ? status : fail(status, "repeat initialize");
}

int aclFinalize(void)
{
    pthread_mutex_lock(&lock);
    int status = initialized ? ACL_SUCCESS : ACL_ERROR_REPEAT_FINALIZE;
    int devices = 0;
    for (int d = 0; d < MAX_DEVICES; ++d) {
        devices += contexts[d].live;
    }
    initialized = 0;
    pthread_mutex_unlock(&lock);
    fake_log("aclFinalize streams=%ld allocations=%ld devices=%d -> %d", live_streams, live_allocations, devices,
             status);
    return status;
}

int aclrtSetDevice(int32_t deviceId)
{
    if (!initialized) {
        return fail(ACL_ERROR_UNINITIALIZE, "aclInit was not called");
    }
    if (deviceId < 0 || deviceId >= MAX_DEVICES) {
        return fail(ACL_ERROR_INVALID_PARAM, "no such device");
    }
    pthread_mutex_lock(&lock);
    contexts[deviceId].device = deviceId;
    contexts[deviceId].live = 1;
    pthread_mutex_unlock(&lock);
    current = &contexts[deviceId];
    fake_log("aclrtSetDevice %d", deviceId);
    return ACL_SUCCESS;
}

int aclrtResetDevice(int32_t deviceId)
{
    if (deviceId < 0 || deviceId >= MAX_DEVICES || !contexts[deviceId].live) {
        return fail(ACL_ERROR_INVALID_PARAM, "device was not set");
    }
    pthread_mutex_lock(&lock);
    contexts[deviceId].live = 0;
    pthread_mutex_unlock(&lock);
    if (current == &contexts[deviceId]) {
        current = NULL;
    }
    fake_log("aclrtResetDevice %d streams=%ld", deviceId, contexts[deviceId].streams);
    return ACL_SUCCESS;
}

int aclrtGetCurrentContext(void **context)
{
    if (context == NULL) {
        return fail(ACL_ERROR_INVALID_PARAM, "context is nullptr");
    }
    int status = need_context();
    if (status == ACL_SUCCESS) {
        *context = current;
    }
    return status;
}

int aclrtSetCurrentContext(void *context)
{
    Context *c = context;
    if (c < contexts || c >= contexts + MAX_DEVICES || !c->live) {
        return fail(ACL_ERROR_RT_INVALID_HANDLE, "not a live context");
    }
    current = c;
    fake_log("aclrtSetCurrentContext %d", c->device);
    return ACL_SUCCESS;
}

int aclrtCreateStream(void **stream)
{
    int status = need_context();
    if (status != ACL_SUCCESS) {
        return status;
    }
    if (stream == NULL) {
        return fail(ACL_ERROR_INVALID_PARAM, "stream is nullptr");
    }
    Stream *s = calloc(1, sizeof *s);
    s->ctx = current;
    pthread_mutex_lock(&lock);
    ++current->streams;
    ++live_streams;
    pthread_mutex_unlock(&lock);
    *stream = s;
    fake_log("aclrtCreateStream %d", current->device);
    return ACL_SUCCESS;
}

int aclrtSynchronizeStream(void *stream)
{
    Stream *s = stream;
    int status = in_context(s);
    if (status != ACL_SUCCESS) {
        return status;
    }
    while (s->head != NULL) {
        Task *t = s->head;
        s->head = t->next;
        t->fn(t->arg);
        free(t);
    }
    s->tail = NULL;
    return ACL_SUCCESS;
}

int aclrtDestroyStream(void *stream)
{
    Stream *s = stream;
    int status = in_context(s);
    if (status != ACL_SUCCESS) {
        return status;
    }
    if (s->head != NULL) {
        return fail(ACL_ERROR_INVALID_PARAM, "stream has tasks that were not synchronized");
    }
    pthread_mutex_lock(&lock);
    --s->ctx->streams;
    --live_streams;
    pthread_mutex_unlock(&lock);
    fake_log("aclrtDestroyStream %d", s->ctx->device);
    free(s);
    return ACL_SUCCESS;
}

int fake_enqueue(void *stream, void (*fn)(void *), void *arg)
{
    Stream *s = stream;
    int status = in_context(s);
    if (status != ACL_SUCCESS) {
        return status;
    }
    Task *t = calloc(1, sizeof *t);
    t->fn = fn;
    t->arg = arg;
    if (s->tail != NULL) {
        s->tail->next = t;
    } else {
        s->head = t;
    }
    s->tail = t;
    return ACL_SUCCESS;
}

int aclrtMalloc(void **devPtr, size_t size, int policy)
{
    (void)policy;
    int status = need_context();
    if (status != ACL_SUCCESS) {
        return status;
    }
    if (devPtr == NULL || size == 0) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMalloc: nullptr or size 0");
    }
    *devPtr = aligned_alloc(32, (size + 31) / 32 * 32);
    pthread_mutex_lock(&lock);
    ++live_allocations;
    pthread_mutex_unlock(&lock);
    return ACL_SUCCESS;
}

int aclrtFree(void *devPtr)
{
    int status = need_context();
    if (status != ACL_SUCCESS) {
        return status;
    }
    free(devPtr);
    pthread_mutex_lock(&lock);
    --live_allocations;
    pthread_mutex_unlock(&lock);
    return ACL_SUCCESS;
}

int aclrtMemcpy(void *dst, size_t destMax, const void *src, size_t count, int kind)
{
    (void)kind;
    int status = need_context();
    if (status != ACL_SUCCESS) {
        return status;
    }
    if (count > destMax || dst == NULL || src == NULL) {
        return fail(ACL_ERROR_INVALID_PARAM, "aclrtMemcpy: count > destMax or nullptr");
    }
    memcpy(dst, src, count);
    return ACL_SUCCESS;
}
