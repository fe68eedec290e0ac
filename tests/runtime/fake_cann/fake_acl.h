/* Shared by the fake CANN libraries the npu backend tests load: the aclTensor they pass around
 * and the hooks the fake op library takes from the fake libascendcl. */
#ifndef FAKE_ACL_H
#define FAKE_ACL_H
#include <stddef.h>
#include <stdint.h>

#define FAKE_MAX_RANK 8

typedef struct FakeTensor {
    int64_t dims[FAKE_MAX_RANK];
    uint64_t ndim;
    int dtype;
    int64_t strides[FAKE_MAX_RANK];
    int64_t offset;
    int format;
    void *data;
} FakeTensor;

/* The aclnn API's type names (aclnn/acl_meta.h), so that the prototypes npu_fakes.py derives from
 * the emitted OpDefs read as op_build writes them. */
typedef FakeTensor aclTensor;
typedef struct FakeExecutor aclOpExecutor;
typedef void *aclrtStream;
typedef int aclnnStatus;

/* Queue fn(arg) on the stream; like a launch, it needs the stream's context current in the
 * calling thread. Returns an aclError. */
int fake_enqueue(void *stream, void (*fn)(void *), void *arg);
/* What aclGetRecentErrMsg returns next in this thread. */
void fake_set_error(const char *msg);
/* One line in $FAKE_ACL_LOG (when set), prefixed with the calling thread's id. */
void fake_log(const char *fmt, ...);

#endif
