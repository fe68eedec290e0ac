/* A fake libnnopbase.so: aclCreateTensor / aclDestroyTensor with aclnn's prototypes. */
#include <stdlib.h>
#include <string.h>

#include "fake_acl.h"

static long live_tensors;

void *aclCreateTensor(const int64_t *viewDims, uint64_t viewDimsNum, int dataType, const int64_t *stride,
                      int64_t offset, int format, const int64_t *storageDims, uint64_t storageDimsNum,
                      void *tensorData)
{
    (void)storageDims;
    (void)storageDimsNum;
    if (viewDimsNum > FAKE_MAX_RANK || ((uintptr_t)tensorData % 32) != 0) {
        return NULL;
    }
    FakeTensor *t = calloc(1, sizeof *t);
    t->ndim = viewDimsNum;
    memcpy(t->dims, viewDims, viewDimsNum * sizeof *viewDims);
    memcpy(t->strides, stride, viewDimsNum * sizeof *stride);
    t->dtype = dataType;
    t->offset = offset;
    t->format = format;
    t->data = tensorData;
    __atomic_add_fetch(&live_tensors, 1, __ATOMIC_SEQ_CST);
    return t;
}

int aclDestroyTensor(const void *tensor)
{
    free((void *)tensor);
    __atomic_sub_fetch(&live_tensors, 1, __ATOMIC_SEQ_CST);
    return 0;
}

long fake_live_tensors(void)
{
    return __atomic_load_n(&live_tensors, __ATOMIC_SEQ_CST);
}
