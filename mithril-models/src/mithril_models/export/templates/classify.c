/* classify: image classification as a standalone program (exported by mithril_models.export_program).
 *
 *   ./classify input.f32 [--weights PATH] [--threads N] [--logits OUT.f32]
 *
 * input.f32 is raw little-endian float32 NCHW of the shape named in the weights file's header (input
 * entry "input"). Prints the top-5 classes as "class_id score" lines (score: the softmax probability),
 * most likely first; --logits also writes the raw float32 logits. Bad input: a one-line message on
 * stderr and exit status 2. No globals. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "model.h"
#include "weights.h"
#include "program.h"

#define PROGRAM "classify"
#define TOP 5

typedef struct {
    const char *input;
    const char *weights;
    const char *logits;
    int threads;
} options;

static int parse_options(int argc, char **argv, options *o, char *err, size_t len) {
    long long value;
    memset(o, 0, sizeof *o);
    o->threads = 1;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        if (strncmp(flag, "--", 2) != 0) {
            if (o->input) return mtc_error(err, len, "one input file expected, got '%s' and '%s'", o->input, flag);
            o->input = flag;
            continue;
        }
        const char *arg = i + 1 < argc ? argv[++i] : NULL;
        if (!arg) return mtc_error(err, len, "%s needs a value", flag);
        if (strcmp(flag, "--weights") == 0) o->weights = arg;
        else if (strcmp(flag, "--logits") == 0) o->logits = arg;
        else if (strcmp(flag, "--threads") == 0) {
            if (mtc_int(arg, 1, 1024, &value)) {
                return mtc_error(err, len, "--threads must be an integer in 1..1024, got '%s'", arg);
            }
            o->threads = (int)value;
        } else {
            return mtc_error(err, len, "unknown option '%s'; usage: classify input.f32 [--weights PATH] [--threads N] "
                             "[--logits OUT.f32]", flag);
        }
    }
    if (!o->input) return mtc_error(err, len, "usage: classify input.f32 [--weights PATH] [--threads N] [--logits OUT.f32]");
    return 0;
}

/* Read exactly `count` floats from `path` (its size must match). */
static int read_input(const char *path, float *dst, size_t count, const mtw_expect *shape, char *err, size_t len) {
    char dims[160];
    mtw_shape_text(dims, sizeof dims, shape->ndim, shape->shape);
    FILE *in = fopen(path, "rb");
    if (!in) return mtc_error(err, len, "cannot open the input file %s", path);
    long size = fseek(in, 0, SEEK_END) == 0 ? ftell(in) : -1;
    if (size != (long)(count * sizeof(float)) || fseek(in, 0, SEEK_SET) != 0 ||
        fread(dst, sizeof(float), count, in) != count) {
        fclose(in);
        return mtc_error(err, len, "%s has %ld bytes, expected %zu: raw little-endian float32 NCHW %s", path, size,
                         count * sizeof(float), dims);
    }
    fclose(in);
    return 0;
}

int main(int argc, char **argv) {
    char err[1024], path[4096];
    options o;
    mtw_file file;
    const void *tensors[MTP_TENSORS];
    int64_t error[3] = {0, 0, 0};
    if (parse_options(argc, argv, &o, err, sizeof err)) return mtc_fail(PROGRAM, MTC_BAD_INPUT, "%s", err);
    if (mtc_weights_path(path, sizeof path, argv[0], o.weights))
        return mtc_fail(PROGRAM, MTC_BAD_INPUT, "the weights path is too long");
    if (mtw_open(&file, path, mtp_tensors, MTP_TENSORS, tensors, err, sizeof err))
        return mtc_fail(PROGRAM, MTC_BAD_INPUT, "%s", err);
    float *image = malloc(MTP_INPUT_ELEMS * sizeof(float));
    float *logits = malloc(MTP_CLASSES * sizeof(float));
    size_t ws = mithril_evaluate_workspace_size();
    void *workspace = ws ? malloc(ws) : NULL;
    int status = 0;
    if (!image || !logits || (ws && !workspace)) status = mtc_fail(PROGRAM, MTC_FAILED, "out of memory");
    else if (read_input(o.input, image, MTP_INPUT_ELEMS, &mtp_tensors[MTP_INPUT_INDEX], err, sizeof err))
        status = mtc_fail(PROGRAM, MTC_BAD_INPUT, "%s", err);
    if (!status) {
        mithril_evaluate_args a;
        memset(&a, 0, sizeof a);
        mtp_bind_weights(&a, tensors);
        mtp_bind_io(&a, image, logits);
        a.workspace = workspace;
        a.error = error;
        int code = mithril_evaluate(&a, o.threads);
        if (code == MT_ERR_INDEX)
            status = mtc_fail(PROGRAM, MTC_FAILED, "index %lld at flat position %lld is out of range for %s",
                              (long long)error[1], (long long)error[2], mithril_evaluate_check_site((long)error[0]));
        else if (code != MT_OK)
            status = mtc_fail(PROGRAM, MTC_FAILED, "the model failed with code %d", code);
    }
    if (!status && o.logits) {
        FILE *out = fopen(o.logits, "wb");
        int failed = !out || fwrite(logits, sizeof(float), MTP_CLASSES, out) != MTP_CLASSES, code = errno;
        if (out && fclose(out) != 0 && !failed) { /* a full disk shows when the buffer is written */
            failed = 1;
            code = errno;
        }
        if (failed) status = mtc_fail(PROGRAM, MTC_FAILED, "cannot write %s: %s", o.logits, strerror(code));
    }
    if (!status) {
        int best[TOP];
        int shown = MTP_CLASSES < TOP ? MTP_CLASSES : TOP;
        double top = -INFINITY, total = 0;
        for (int i = 0; i < MTP_CLASSES; i++)
            if (logits[i] > top) top = logits[i];
        for (int i = 0; i < MTP_CLASSES; i++) total += exp((double)logits[i] - top);
        for (int r = 0; r < shown; r++) { /* the r-th largest; ties: the lower class id first */
            best[r] = -1;
            for (int i = 0; i < MTP_CLASSES; i++) {
                int taken = 0;
                for (int s = 0; s < r; s++) taken |= best[s] == i;
                if (!taken && (best[r] < 0 || logits[i] > logits[best[r]])) best[r] = i;
            }
            printf("%d %.6f\n", best[r], exp((double)logits[best[r]] - top) / total);
        }
        status = mtc_flush_stdout(PROGRAM);
    }
    free(image);
    free(logits);
    free(workspace);
    mtw_close(&file);
    return status;
}
