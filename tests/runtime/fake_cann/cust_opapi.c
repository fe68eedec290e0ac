/* A fake libcust_opapi.so: the aclnn API op_build generates for the emitted operators. Their
 * prototypes come from fake_aclnn_ops.h, which npu_fakes.py derives from the OpDefs lower emits
 * the way op_build derives them (inputs, attributes in the OpDef's order, outputs, then
 * workspaceSize and executor), so a definition here that drifts from an emitted OpDef does not
 * compile. An operator's definitions are compiled in when FAKE_OP_<op name> is defined: the
 * package of one of lower's projects holds one operator, a test library may hold several.
 *
 * The operators compute the fused ops' formulas (contracts/fused_ops.py) in double precision on
 * float32, float16 and bfloat16 tensors, with the dtype rules of their OpDefs: CANN's operators
 * take one dtype of CANN's list for every tensor; the project's own proximal operator also takes
 * float32 scalars beside float16/bfloat16 tensors. An input of one element broadcasts; other
 * shapes must have the output's element count. Launches queue on the stream through the fake
 * libascendcl (so they need the stream's context in the launching thread) and run at
 * aclrtSynchronizeStream. */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "fake_aclnn_ops.h"

enum { ACLNN_SUCCESS = 0, ACLNN_ERR_PARAM_NULLPTR = 161001, ACLNN_ERR_PARAM_INVALID = 161002 };
enum { DT_FLOAT = 0, DT_FLOAT16 = 1, DT_BF16 = 27 };
enum { RAW = 0, FOLDED = 1, FOLDED_RECIPROCAL = 2 };
#define WORKSPACE_BYTES 64

struct FakeExecutor {
    const char *op;
    void (*run)(void *);
    const aclTensor *in[5];
    aclTensor *out;
    double sigma, scale, shrink_max;
    int reduction; /* 0 none, 1 mean, 2 sum */
    int scalar_form;
    int nonfinite; /* 0 select, 1 blend, 2 blend_dout (SmoothL1) or nan_to_zero (the update) */
};

#if defined(FAKE_OP_AscendLoweringSmoothL1LossGrad) || defined(FAKE_OP_AscendLoweringApplyProximalGradientDescent)
/* the nonfinite attribute of the project's own operators: its index among `names`, -1 if unknown */
static int nonfinite_of(const char *given, const char *const names[3])
{
    for (int i = 0; i < 3; ++i) {
        if (given && !strcmp(given, names[i])) {
            return i;
        }
    }
    return -1;
}
#endif

static int64_t numel(const aclTensor *t)
{
    int64_t n = 1;
    for (uint64_t i = 0; i < t->ndim; ++i) {
        n *= t->dims[i];
    }
    return n;
}

static double half_to_double(uint16_t h)
{
    double sign = (h & 0x8000u) ? -1.0 : 1.0;
    int exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) {
        return mant ? NAN : sign * INFINITY;
    }
    return exp == 0 ? sign * ldexp(mant, -24) : sign * ldexp(mant | 0x400, exp - 25);
}

static uint16_t float_to_half(float f) /* round half to even, overflow to inf */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, absx = x & 0x7fffffffu;
    if (absx > 0x7f800000u) {
        return (uint16_t)(sign | 0x7e00u);
    }
    if (absx >= 0x477ff000u) {
        return (uint16_t)(sign | 0x7c00u);
    }
    if (absx < 0x38800000u) { /* a subnormal half: 2^24 |f| is exact, then rounded to an integer */
        return (uint16_t)(sign | (uint32_t)nearbyintf(fabsf(f) * 16777216.0f));
    }
    uint32_t mant = absx & 0x7fffffu, rest = mant & 0x1fffu;
    uint32_t h = ((absx >> 23) - 112u) << 10 | (mant >> 13);
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) {
        ++h;
    }
    return (uint16_t)(sign | h);
}

static double bf16_to_double(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static uint16_t float_to_bf16(float f) /* round half to even; NaN stays quiet */
{
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) {
        return (uint16_t)((x >> 16) | 0x40u);
    }
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

static double load(const aclTensor *t, int64_t i)
{
    if (numel(t) == 1) {
        i = 0;
    }
    i += t->offset;
    switch (t->dtype) {
    case DT_FLOAT16:
        return half_to_double(((const uint16_t *)t->data)[i]);
    case DT_BF16:
        return bf16_to_double(((const uint16_t *)t->data)[i]);
    default:
        return ((const float *)t->data)[i];
    }
}

static void store(aclTensor *t, int64_t i, double v)
{
    i += t->offset;
    switch (t->dtype) {
    case DT_FLOAT16:
        ((uint16_t *)t->data)[i] = float_to_half((float)v);
        break;
    case DT_BF16:
        ((uint16_t *)t->data)[i] = float_to_bf16((float)v);
        break;
    default:
        ((float *)t->data)[i] = (float)v;
    }
}

static int invalid(const char *msg)
{
    fake_set_error(msg);
    return ACLNN_ERR_PARAM_INVALID;
}

static int nullptr_argument(void)
{
    fake_set_error("nullptr argument");
    return ACLNN_ERR_PARAM_NULLPTR;
}

static double sign_keep_nan(double x)
{
    return isnan(x) ? x : (double)((x > 0) - (x < 0));
}

static int dtype_in(int dtype, const int *allowed, int count)
{
    for (int i = 0; i < count; ++i) {
        if (dtype == allowed[i]) {
            return 1;
        }
    }
    return 0;
}

/* n elements, or one where one_ok */
static int sized(const aclTensor *t, int64_t n, int one_ok)
{
    int64_t m = numel(t);
    return m == n || (one_ok && m == 1);
}

static int prepared(struct FakeExecutor *e, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    struct FakeExecutor *copy = malloc(sizeof *copy);
    *copy = *e;
    *workspaceSize = WORKSPACE_BYTES;
    *executor = copy;
    return ACLNN_SUCCESS;
}

static int launch(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor, aclrtStream stream,
                  const char *op)
{
    if (executor == NULL) {
        fake_set_error("executor is nullptr");
        return ACLNN_ERR_PARAM_NULLPTR;
    }
    if (strcmp(executor->op, op) != 0) {
        return invalid("executor was prepared by another operator's GetWorkspaceSize");
    }
    if (workspace == NULL || workspaceSize < WORKSPACE_BYTES) {
        return invalid("workspace smaller than GetWorkspaceSize asked for");
    }
    int status = fake_enqueue(stream, executor->run, executor);
    fake_log("aclnn%s -> %d", op, status);
    return status;
}

#if defined(FAKE_OP_SmoothL1LossGradV2) || defined(FAKE_OP_AscendLoweringSmoothL1LossGrad)
static void run_smooth_l1(void *arg)
{
    struct FakeExecutor *e = arg;
    int64_t n = numel(e->in[0]);
    double norm = e->reduction == 1 && n ? 1.0 / (double)n : 1.0;
    for (int64_t i = 0; i < n; ++i) {
        double x = load(e->in[0], i) - load(e->in[1], i);
        double d = load(e->in[2], i);
        double linear = x / (e->sigma > 0 ? e->sigma : 1.0);
        double s = fabs(x) < e->sigma ? linear : sign_keep_nan(x);
        if (e->nonfinite == 1) { /* an arithmetic select: 0 * each branch */
            s = s + 0.0 * linear + 0.0 * sign_keep_nan(x);
        }
        double out = e->scale * norm * d * s;
        if (e->nonfinite == 2) {
            out = out + 0.0 * (e->scale * norm * d * linear) + 0.0 * (e->scale * norm * d * sign_keep_nan(x));
        }
        store(e->out, i, out);
    }
    free(e);
}

/* SmoothL1LossGradV2's OpDef: bfloat16, float16 or float32, one for all four tensors. */
static int smooth_l1_prepare(const char *op, const aclTensor *predict, const aclTensor *label,
                             const aclTensor *dout, double sigma, const char *reduction, double scale,
                             int nonfinite, aclTensor *gradient, uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const int dtypes[] = {DT_BF16, DT_FLOAT16, DT_FLOAT};
    if (!predict || !label || !dout || !gradient || !reduction || !workspaceSize || !executor) {
        return nullptr_argument();
    }
    int dt = predict->dtype;
    if (!dtype_in(dt, dtypes, 3) || label->dtype != dt || dout->dtype != dt || gradient->dtype != dt) {
        return invalid("predict, label, dout and gradient must share one dtype of bfloat16, float16, float");
    }
    int64_t n = numel(predict);
    if (!sized(label, n, 1) || !sized(dout, n, 1) || !sized(gradient, n, 0)) {
        return invalid("label and dout of predict's element count or one element, gradient of predict's expected");
    }
    int red = !strcmp(reduction, "none") ? 0 : !strcmp(reduction, "mean") ? 1 : !strcmp(reduction, "sum") ? 2 : -1;
    if (red < 0 || !(sigma >= 0)) {
        return invalid("reduction must be none, mean or sum and sigma >= 0");
    }
    fake_log("aclnn%sGetWorkspaceSize sigma=%g reduction=%s scale=%g", op, sigma, reduction, scale);
    if (nonfinite < 0) {
        return invalid("nonfinite must be select, blend or blend_dout");
    }
    struct FakeExecutor e = {.op = op, .run = run_smooth_l1, .in = {predict, label, dout}, .out = gradient,
                             .sigma = sigma, .scale = scale, .reduction = red, .nonfinite = nonfinite};
    return prepared(&e, workspaceSize, executor);
}
#endif

#if defined(FAKE_OP_ApplyProximalGradientDescent) || defined(FAKE_OP_AscendLoweringApplyProximalGradientDescent)
/* numpy's maximum and minimum: NaN if either is NaN */
static double max_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : (a > b ? a : b);
}

static double min_nan(double a, double b)
{
    return isnan(a) || isnan(b) ? NAN : (a < b ? a : b);
}

static void run_proximal(void *arg)
{
    struct FakeExecutor *e = arg;
    int64_t n = numel(e->in[0]);
    double a = load(e->in[1], 0), l1 = load(e->in[2], 0), l2 = load(e->in[3], 0);
    double threshold = e->scalar_form == RAW ? a * l1 : l1;
    double divisor = e->scalar_form == RAW ? 1.0 + a * l2 : e->scalar_form == FOLDED ? l2 : 1.0 / l2;
    for (int64_t i = 0; i < n; ++i) {
        double prox = load(e->in[0], i) - a * load(e->in[4], i);
        double shrunk = min_nan(max_nan(fabs(prox) - threshold, 0.0), e->shrink_max);
        double out = isnan(prox) ? prox : sign_keep_nan(prox) * shrunk / divisor;
        if (e->nonfinite == 1) { /* an arithmetic select: NaN where prox is +-inf */
            out = out + 0.0 * prox;
        } else if (e->nonfinite == 2 && isnan(prox)) { /* a where-chain or Shrink: 0 where prox is NaN */
            out = 0.0;
        }
        store(e->out, i, out);
    }
    free(e);
}

/* var, delta and var_out share one dtype of `dtypes`; alpha, l1 and l2 hold one element each, of
 * var's dtype or (scalars_f32) float32. */
static int proximal_prepare(const char *op, const aclTensor *var, const aclTensor *alpha, const aclTensor *l1,
                            const aclTensor *l2, const aclTensor *delta, int scalar_form, double shrink_max,
                            int nonfinite, aclTensor *varOut, const int *dtypes, int ndtypes, int scalars_f32,
                            uint64_t *workspaceSize, aclOpExecutor **executor)
{
    if (!var || !alpha || !l1 || !l2 || !delta || !varOut || !workspaceSize || !executor) {
        return nullptr_argument();
    }
    int dt = var->dtype;
    if (!dtype_in(dt, dtypes, ndtypes) || delta->dtype != dt || varOut->dtype != dt) {
        return invalid("var, delta and varOut must share one dtype the operator takes");
    }
    const aclTensor *scalars[] = {alpha, l1, l2};
    for (int i = 0; i < 3; ++i) {
        if (!(scalars[i]->dtype == dt || (scalars_f32 && scalars[i]->dtype == DT_FLOAT))) {
            return invalid(scalars_f32 ? "alpha, l1 and l2 must have var's dtype or float"
                                       : "alpha, l1 and l2 must have var's dtype");
        }
        if (numel(scalars[i]) != 1) {
            return invalid("alpha, l1 and l2 must hold one element");
        }
    }
    int64_t n = numel(var);
    if (!sized(delta, n, 0) || !sized(varOut, n, 0)) {
        return invalid("delta and varOut must have var's element count");
    }
    fake_log("aclnn%sGetWorkspaceSize scalar_form=%d shrink_max=%g", op, scalar_form, shrink_max);
    if (nonfinite < 0) {
        return invalid("nonfinite must be select, blend or nan_to_zero");
    }
    struct FakeExecutor e = {.op = op, .run = run_proximal, .in = {var, alpha, l1, l2, delta}, .out = varOut,
                             .shrink_max = shrink_max, .scalar_form = scalar_form, .nonfinite = nonfinite};
    return prepared(&e, workspaceSize, executor);
}
#endif

#ifdef FAKE_OP_SmoothL1LossGradV2
aclnnStatus aclnnSmoothL1LossGradV2GetWorkspaceSize(const aclTensor *predict, const aclTensor *label,
                                                    const aclTensor *dout, double sigma, char *reduction,
                                                    aclTensor *gradient, uint64_t *workspaceSize,
                                                    aclOpExecutor **executor)
{
    return smooth_l1_prepare("SmoothL1LossGradV2", predict, label, dout, sigma, reduction, 1.0, 0, gradient,
                             workspaceSize, executor);
}

aclnnStatus aclnnSmoothL1LossGradV2(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                    aclrtStream stream)
{
    return launch(workspace, workspaceSize, executor, stream, "SmoothL1LossGradV2");
}
#endif

#ifdef FAKE_OP_AscendLoweringSmoothL1LossGrad
aclnnStatus aclnnAscendLoweringSmoothL1LossGradGetWorkspaceSize(const aclTensor *predict, const aclTensor *label,
                                                                const aclTensor *dout, double sigma,
                                                                char *reduction, double scale, char *nonfinite,
                                                                aclTensor *gradient, uint64_t *workspaceSize,
                                                                aclOpExecutor **executor)
{
    static const char *const forms[3] = {"select", "blend", "blend_dout"};
    return smooth_l1_prepare("AscendLoweringSmoothL1LossGrad", predict, label, dout, sigma, reduction, scale,
                             nonfinite_of(nonfinite, forms), gradient, workspaceSize, executor);
}

aclnnStatus aclnnAscendLoweringSmoothL1LossGrad(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                                aclrtStream stream)
{
    return launch(workspace, workspaceSize, executor, stream, "AscendLoweringSmoothL1LossGrad");
}
#endif

#ifdef FAKE_OP_ApplyProximalGradientDescent
/* CANN's prototype: no attributes (the raw scalar form, no clamp), float or float16 throughout. */
aclnnStatus aclnnApplyProximalGradientDescentGetWorkspaceSize(const aclTensor *var, const aclTensor *alpha,
                                                              const aclTensor *l1, const aclTensor *l2,
                                                              const aclTensor *delta, aclTensor *varOut,
                                                              uint64_t *workspaceSize, aclOpExecutor **executor)
{
    static const int dtypes[] = {DT_FLOAT16, DT_FLOAT};
    return proximal_prepare("ApplyProximalGradientDescent", var, alpha, l1, l2, delta, RAW, INFINITY, 0, varOut,
                            dtypes, 2, 0, workspaceSize, executor);
}

aclnnStatus aclnnApplyProximalGradientDescent(void *workspace, uint64_t workspaceSize, aclOpExecutor *executor,
                                              aclrtStream stream)
{
    return launch(workspace, workspaceSize, executor, stream, "ApplyProximalGradientDescent");
}
#endif

#ifdef FAKE_OP_AscendLoweringApplyProximalGradientDescent
aclnnStatus aclnnAscendLoweringApplyProximalGradientDescentGetWorkspaceSize(
    const aclTensor *var, const aclTensor *alpha, const aclTensor *l1, const aclTensor *l2, const aclTensor *delta,
    char *scalarForm, double shrinkMax, char *nonfinite, aclTensor *varOut, uint64_t *workspaceSize,
    aclOpExecutor **executor)
{
    static const char *const forms[3] = {"select", "blend", "nan_to_zero"};
    static const int dtypes[] = {DT_BF16, DT_FLOAT16, DT_FLOAT};
    if (!scalarForm) {
        return nullptr_argument();
    }
    int form = !strcmp(scalarForm, "raw") ? RAW : !strcmp(scalarForm, "folded") ? FOLDED
             : !strcmp(scalarForm, "folded_reciprocal") ? FOLDED_RECIPROCAL : -1;
    if (form < 0) {
        return invalid("scalar_form must be raw, folded or folded_reciprocal");
    }
    return proximal_prepare("AscendLoweringApplyProximalGradientDescent", var, alpha, l1, l2, delta, form,
                            shrinkMax, nonfinite_of(nonfinite, forms), varOut, dtypes, 3, 1, workspaceSize, executor);
}

aclnnStatus aclnnAscendLoweringApplyProximalGradientDescent(void *workspace, uint64_t workspaceSize,
                                                            aclOpExecutor *executor, aclrtStream stream)
{
    return launch(workspace, workspaceSize, executor, stream, "AscendLoweringApplyProximalGradientDescent");
}
#endif
