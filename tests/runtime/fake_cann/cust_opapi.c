/* A fake libcust_opapi.so: the aclnn API opbuild generates for the two emitted operators (inputs,
 * then attributes in the OpDef's order, then outputs that are not updated inputs, then
 * workspaceSize and executor), computing the fused ops' formulas (lowering/fused_ops.py) in
 * double precision on float32 tensors. An input of one element broadcasts; other shapes must
 * match. Launches queue on the stream through the fake libascendcl (so they need the stream's
 * context in the launching thread) and run at aclrtSynchronizeStream. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fake_acl.h"

enum { ACLNN_SUCCESS = 0, ACLNN_ERR_PARAM_NULLPTR = 161001, ACLNN_ERR_PARAM_INVALID = 161002 };
enum { FLOAT32 = 0 };
#define WORKSPACE_BYTES 64

typedef struct Executor {
    int op; /* 0 SmoothL1LossGradV2, 1 ApplyProximalGradientDescent */
    const FakeTensor *in[5];
    FakeTensor *out;
    double sigma, scale, shrink_max;
    int reduction; /* 0 none, 1 mean, 2 sum */
    int scalar_form; /* 0 raw, 1 folded, 2 folded_reciprocal */
} Executor;

static int64_t numel(const FakeTensor *t)
{
    int64_t n = 1;
    for (uint64_t i = 0; i < t->ndim; ++i) {
        n *= t->dims[i];
    }
    return n;
}

static const float *floats(const FakeTensor *t)
{
    return (const float *)t->data + t->offset;
}

static int invalid(const char *msg)
{
    fake_set_error(msg);
    return ACLNN_ERR_PARAM_INVALID;
}

static double sign_keep_nan(double x)
{
    return isnan(x) ? x : (double)((x > 0) - (x < 0));
}

static int check_float(const FakeTensor *t, int64_t n, int one_ok)
{
    if (t->dtype != FLOAT32) {
        return 0;
    }
    int64_t m = numel(t);
    return m == n || (one_ok && m == 1);
}

#ifndef FAKE_WITHOUT_SMOOTH_L1
static void run_smooth_l1(void *arg)
{
    Executor *e = arg;
    int64_t n = numel(e->in[0]);
    const float *p = floats(e->in[0]), *l = floats(e->in[1]), *d = floats(e->in[2]);
    int64_t ls = numel(e->in[1]) == 1 ? 0 : 1, ds = numel(e->in[2]) == 1 ? 0 : 1;
    double norm = e->reduction == 1 && n ? 1.0 / (double)n : 1.0;
    float *out = (float *)e->out->data + e->out->offset;
    for (int64_t i = 0; i < n; ++i) {
        double x = (double)p[i] - (double)l[i * ls];
        double s = fabs(x) < e->sigma ? x / e->sigma : sign_keep_nan(x);
        out[i] = (float)(e->scale * norm * (double)d[i * ds] * s);
    }
    free(e);
}
#endif

static void run_proximal(void *arg)
{
    Executor *e = arg;
    int64_t n = numel(e->in[0]);
    float *var = (float *)e->in[0]->data + e->in[0]->offset;
    const float *delta = floats(e->in[4]);
    double a = floats(e->in[1])[0], l1 = floats(e->in[2])[0], l2 = floats(e->in[3])[0];
    double threshold = e->scalar_form == 0 ? a * l1 : l1;
    double divisor = e->scalar_form == 0 ? 1.0 + a * l2 : e->scalar_form == 1 ? l2 : 1.0 / l2;
    for (int64_t i = 0; i < n; ++i) {
        double prox = (double)var[i] - a * (double)delta[i];
        double shrunk = fmin(fmax(fabs(prox) - threshold, 0.0), e->shrink_max);
        var[i] = (float)(isnan(prox) ? prox : sign_keep_nan(prox) * shrunk / divisor);
    }
    free(e);
}

static int launch(void *workspace, uint64_t workspaceSize, void *executor, void *stream, void (*fn)(void *),
                  const char *op)
{
    if (executor == NULL) {
        fake_set_error("executor is nullptr");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    if (workspace == NULL || workspaceSize < WORKSPACE_BYTES) {
        return invalid("workspace smaller than GetWorkspaceSize asked for");
    }
    int status = fake_enqueue(stream, fn, executor);
    fake_log("%s -> %d", op, status);
    return status;
}

#ifndef FAKE_WITHOUT_SMOOTH_L1
int aclnnSmoothL1LossGradV2GetWorkspaceSize(const FakeTensor *predict, const FakeTensor *label,
                                            const FakeTensor *dout, double sigma, const char *reduction,
                                            double scale, FakeTensor *gradient, uint64_t *workspaceSize,
                                            void **executor)
{
    if (!predict || !label || !dout || !gradient || !reduction || !workspaceSize || !executor) {
        fake_set_error("nullptr argument");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    int64_t n = numel(predict);
    if (!check_float(predict, n, 0) || !check_float(label, n, 1) || !check_float(dout, n, 1) ||
        !check_float(gradient, n, 0)) {
        return invalid("float32 tensors of predict's element count (label, dout: or one element) expected");
    }
    int red = !strcmp(reduction, "none") ? 0 : !strcmp(reduction, "mean") ? 1 : !strcmp(reduction, "sum") ? 2 : -1;
    if (red < 0 || !(sigma >= 0)) {
        return invalid("reduction must be none, mean or sum and sigma >= 0");
    }
    Executor *e = calloc(1, sizeof *e);
    *e = (Executor){.op = 0, .in = {predict, label, dout}, .out = gradient, .sigma = sigma, .scale = scale,
                    .reduction = red};
    *workspaceSize = WORKSPACE_BYTES;
    *executor = e;
    fake_log("aclnnSmoothL1LossGradV2GetWorkspaceSize sigma=%g reduction=%s scale=%g", sigma, reduction, scale);
    return ACLNN_SUCCESS;
}

int aclnnSmoothL1LossGradV2(void *workspace, uint64_t workspaceSize, void *executor, void *stream)
{
    return launch(workspace, workspaceSize, executor, stream, run_smooth_l1, "aclnnSmoothL1LossGradV2");
}
#endif

int aclnnApplyProximalGradientDescentGetWorkspaceSize(FakeTensor *var, const FakeTensor *alpha,
                                                      const FakeTensor *l1, const FakeTensor *l2,
                                                      const FakeTensor *delta, bool useLocking,
                                                      const char *scalarForm, double shrinkMax,
                                                      uint64_t *workspaceSize, void **executor)
{
    (void)useLocking;
    if (!var || !alpha || !l1 || !l2 || !delta || !scalarForm || !workspaceSize || !executor) {
        fake_set_error("nullptr argument");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    int64_t n = numel(var);
    if (!check_float(var, n, 0) || !check_float(delta, n, 0) || !check_float(alpha, 1, 0) ||
        !check_float(l1, 1, 0) || !check_float(l2, 1, 0)) {
        return invalid("float32 var and delta of one size and one-element scalars expected");
    }
    int form = !strcmp(scalarForm, "raw") ? 0 : !strcmp(scalarForm, "folded") ? 1
             : !strcmp(scalarForm, "folded_reciprocal") ? 2 : -1;
    if (form < 0) {
        return invalid("scalar_form must be raw, folded or folded_reciprocal");
    }
    Executor *e = calloc(1, sizeof *e);
    *e = (Executor){.op = 1, .in = {var, alpha, l1, l2, delta}, .out = var, .shrink_max = shrinkMax,
                    .scalar_form = form};
    *workspaceSize = WORKSPACE_BYTES;
    *executor = e;
    fake_log("aclnnApplyProximalGradientDescentGetWorkspaceSize scalar_form=%s shrink_max=%g", scalarForm,
             shrinkMax);
    return ACLNN_SUCCESS;
}

int aclnnApplyProximalGradientDescent(void *workspace, uint64_t workspaceSize, void *executor, void *stream)
{
    return launch(workspace, workspaceSize, executor, stream, run_proximal, "aclnnApplyProximalGradientDescent");
}
