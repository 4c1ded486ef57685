/* generate: text generation (GPT-2, Llama, Mistral) as a standalone program (exported by mithril_models.export_program).
 *
 *   ./generate --tokens "464 3290 318" --max-new-tokens 20 [--top-k K --seed S] [--temperature T]
 *              [--weights PATH] [--threads N] [--logits FILE] [--prefill 1|0] [--timings 1|0]
 *
 * prints the new token ids, space-separated, on one line. Greedy (argmax) unless --top-k K > 1: then a
 * draw from softmax(logits / T) over the K largest logits (ties at the K-th kept) with a SplitMix64
 * generator seeded by S (default 0): the same seed gives the same tokens. The model is a one-token
 * decode step of model.c (KV caches as state, updated in place): of the steps compiled for several cache
 * lengths (mtp_step_slots, at most MTP_CACHE_LEN), the smallest that holds the prompt and the new tokens.
 * The prompt is processed in prefill steps of MTP_CHUNK tokens (the last one overlapping the one before,
 * so that it ends at the prompt's last token), which return the last position's hidden state: the LM head
 * (mtp_head_evaluate) turns the last chunk's into logits once. A prompt shorter than a chunk goes one
 * token at a time, as does every prompt with --prefill 0 (the same tokens, slower: for comparison).
 * --logits FILE writes the logits that choose the first new token (MTP_VOCAB float32, little-endian).
 * --timings 1 prints one line on stderr: the wall and CPU milliseconds of loading, of the prompt and of
 * the decode steps after it (the prompt's figure is the time to the first token's logits).
 * Bad input: a one-line message on stderr and exit status 2. No globals. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "model.h"
#include "weights.h"
#include "program.h"

#define PROGRAM "generate"

/* Parse a float > 0 (all of `text`). */
static int mtc_positive(const char *text, double *out) {
    char *end = NULL;
    if (!text || !*text) return 1;
    errno = 0;
    double value = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(value > 0) || value > 1e30) return 1;
    *out = value;
    return 0;
}

/* Wall and CPU seconds since an arbitrary start (--timings). */
typedef struct {
    double wall, cpu;
} moment;

static moment now(void) {
    struct timespec ts;
    moment m = {0, (double)clock() / CLOCKS_PER_SEC};
    if (timespec_get(&ts, TIME_UTC)) m.wall = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    return m;
}

/* "W ms (CPU C ms)" for the span from `a` to `b`, on stderr. */
static void print_span(moment a, moment b) {
    fprintf(stderr, "%.3f ms (CPU %.3f ms)", (b.wall - a.wall) * 1e3, (b.cpu - a.cpu) * 1e3);
}

typedef struct {
    const char *tokens;
    long long max_new;
    long long top_k;
    unsigned long long seed;
    double temperature;
    int threads;
    const char *weights;
    const char *logits;
    int prefill;
    int timings;
} options;

typedef struct {
    mtw_file file;
    const void *tensors[MTP_TENSORS];
    mtp_args args;
#if MTP_CHUNK
    mtp_chunk_args chunk_args;
    int64_t chunk[MTP_CHUNK]; /* the token ids of a prefill step */
    mtp_head_args head_args;
#endif
    int step;     /* the decode step run: index into mtp_step_slots */
    void *workspace;
    float *cache; /* MTP_CACHES caches of mtp_step_slots[step] slots each, read and written in place */
    float *caches[MTP_CACHES];
    float *logits;   /* [MTP_VOCAB] */
    float *hidden;   /* [MTP_HIDDEN]: the last position's hidden state after a prefill step */
    double *scores;  /* [MTP_VOCAB], top-k sampling */
    double *scratch; /* [MTP_VOCAB], top-k selection */
    int64_t token, position, error[3];
} gpt;

static void gpt_free(gpt *g) {
    mtw_close(&g->file);
    free(g->workspace);
    free(g->cache);
    free(g->logits);
    free(g->hidden);
    free(g->scores);
    free(g->scratch);
}

/* Opens the weights and sets up the smallest decode step whose caches hold `positions` tokens
 * (1..MTP_CACHE_LEN), and its prefill step when `prefill` (one workspace serves both: they run in turn);
 * `sampling`: room for top-k sampling. */
static int gpt_open(gpt *g, const char *path, long positions, int prefill, int sampling, char *err, size_t len) {
    memset(g, 0, sizeof *g);
    if (mtw_open(&g->file, path, mtp_tensors, MTP_TENSORS, g->tensors, err, len)) return MTC_BAD_INPUT;
    while (g->step + 1 < MTP_STEPS && mtp_step_slots[g->step] < positions) g->step++;
    size_t ws = mtp_workspace_size(g->step), elems = (size_t)mtp_step_slots[g->step] * MTP_SLOT_ELEMS;
#if MTP_CHUNK
    if (prefill && mtp_chunk_workspace_size(g->step) > ws) ws = mtp_chunk_workspace_size(g->step);
    if (prefill && mtp_head_workspace_size(0) > ws) ws = mtp_head_workspace_size(0);
#else
    (void)prefill;
#endif
    g->workspace = ws ? malloc(ws) : NULL;
    g->cache = calloc((size_t)MTP_CACHES * elems, sizeof(float));
    g->logits = malloc(MTP_VOCAB * sizeof(float));
#if MTP_CHUNK
    g->hidden = prefill ? malloc(MTP_HIDDEN * sizeof(float)) : NULL;
#endif
    g->scores = sampling ? malloc(MTP_VOCAB * sizeof(double)) : NULL;
    g->scratch = sampling ? malloc(MTP_VOCAB * sizeof(double)) : NULL;
    if ((ws && !g->workspace) || !g->cache || !g->logits || (sampling && (!g->scores || !g->scratch)) ||
        (MTP_CHUNK && prefill && !g->hidden)) {
        snprintf(err, len, "out of memory (caches: %zu bytes)", (size_t)MTP_CACHES * elems * sizeof(float));
        gpt_free(g);
        return MTC_FAILED;
    }
    for (int i = 0; i < MTP_CACHES; i++) g->caches[i] = g->cache + (size_t)i * elems;
    mtp_bind_step(&g->args, g->step, g->tensors, &g->token, &g->position, g->caches, g->logits, g->workspace,
                  g->error);
#if MTP_CHUNK
    mtp_bind_chunk(&g->chunk_args, g->step, g->tensors, g->chunk, &g->position, g->caches, g->hidden, g->workspace,
                   g->error);
    mtp_bind_head(&g->head_args, g->tensors, g->hidden, g->logits, g->workspace, g->error);
#endif
    return 0;
}

/* The message of a step's nonzero status. */
static int gpt_failed(int status, const char *site, const int64_t *error, char *err, size_t len) {
    if (status == MT_ERR_INDEX)
        snprintf(err, len, "index %lld at flat position %lld is out of range for %s", (long long)error[1],
                 (long long)error[2], site);
    else
        snprintf(err, len, "the decode step failed with code %d (%s)", status,
                 status == MT_ERR_ALLOC ? "out of memory" : "unknown");
    return MTC_FAILED;
}

/* One decode step: `token` at `position` updates the caches; the next token's logits land in g->logits. */
static int gpt_step(gpt *g, int64_t token, int64_t position, int threads, char *err, size_t len) {
    g->token = token;
    g->position = position;
    int status = mtp_evaluate(&g->args, g->step, threads);
    if (status != MT_OK) return gpt_failed(status, mtp_check_site(g->step, (long)g->error[0]), g->error, err, len);
    return 0;
}

/* The prompt prompt[0..length): prefill steps of mtp_chunk_tokens[step] tokens while the prompt holds one
 * (the last ending at its last token), else (a shorter prompt, or not `prefill`) one token at a time. */
static int gpt_prompt(gpt *g, const int64_t *prompt, long length, int prefill, int threads, char *err, size_t len) {
    long done = 0;
    (void)prefill; /* unused without prefill steps */
#if MTP_CHUNK
    const long n = mtp_chunk_tokens[g->step];
    for (long start = 0; prefill && length >= n && start < length; start += n) {
        long first = start + n <= length ? start : length - n; /* the last chunk overlaps the one before */
        memcpy(g->chunk, prompt + first, (size_t)n * sizeof(int64_t));
        g->position = first;
        int status = mtp_chunk_evaluate(&g->chunk_args, g->step, threads);
        if (status != MT_OK)
            return gpt_failed(status, mtp_chunk_check_site(g->step, (long)g->error[0]), g->error, err, len);
        done = length;
    }
    if (done) { /* the logits of the last chunk's last position */
        int status = mtp_head_evaluate(&g->head_args, 0, threads);
        if (status != MT_OK) return gpt_failed(status, mtp_head_check_site(0, (long)g->error[0]), g->error, err, len);
    }
#endif
    for (long p = done; p < length; p++) {
        int status = gpt_step(g, prompt[p], p, threads, err, len);
        if (status) return status;
    }
    return 0;
}

/* Write the logits to `path` (MTP_VOCAB float32). */
static int write_logits(const float *logits, const char *path, char *err, size_t len) {
    FILE *out = fopen(path, "wb");
    if (!out || fwrite(logits, sizeof(float), MTP_VOCAB, out) != MTP_VOCAB) {
        if (out) fclose(out);
        snprintf(err, len, "cannot write the logits to %s", path);
        return MTC_FAILED;
    }
    if (fclose(out) != 0) {
        snprintf(err, len, "cannot write the logits to %s", path);
        return MTC_FAILED;
    }
    return 0;
}

static uint64_t splitmix64(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static int64_t argmax(const float *logits) {
    int64_t best = 0;
    for (int64_t i = 1; i < MTP_VOCAB; i++)
        if (logits[i] > logits[best]) best = i;
    return best;
}

/* The k-th largest of values[0..n) (k >= 1); reorders values. */
static double kth_largest(double *values, long n, long k) {
    long lo = 0, hi = n - 1, want = k - 1;
    while (lo < hi) {
        double pivot = values[lo + (hi - lo) / 2];
        long i = lo, j = hi;
        while (i <= j) {
            while (values[i] > pivot) i++;
            while (values[j] < pivot) j--;
            if (i <= j) {
                double t = values[i];
                values[i++] = values[j];
                values[j--] = t;
            }
        }
        if (want <= j) hi = j;
        else if (want >= i) lo = i;
        else break;
    }
    return values[want];
}

/* A draw from softmax(logits / temperature) restricted to the k largest logits (ties at the k-th kept). */
static int64_t sample_top_k(gpt *g, long k, double temperature, uint64_t *rng) {
    double *scores = g->scores, top = -INFINITY, total = 0;
    for (long i = 0; i < MTP_VOCAB; i++) {
        scores[i] = (double)g->logits[i] / temperature;
        g->scratch[i] = scores[i];
    }
    double kth = k < MTP_VOCAB ? kth_largest(g->scratch, MTP_VOCAB, k) : -INFINITY;
    for (long i = 0; i < MTP_VOCAB; i++)
        if (scores[i] >= kth && scores[i] > top) top = scores[i];
    for (long i = 0; i < MTP_VOCAB; i++) {
        scores[i] = scores[i] >= kth ? exp(scores[i] - top) : 0.0;
        total += scores[i];
        scores[i] = total; /* cumulative */
    }
    double draw = (double)(splitmix64(rng) >> 11) * 0x1.0p-53 * total;
    for (long i = 0; i < MTP_VOCAB; i++)
        if (scores[i] > draw) return i;
    return MTP_VOCAB - 1;
}

static int parse_options(int argc, char **argv, options *o, char *err, size_t len) {
    long long value;
    o->tokens = NULL;
    o->max_new = 20;
    o->top_k = 1;
    o->seed = 0;
    o->temperature = 1.0;
    o->threads = 1;
    o->weights = NULL;
    o->logits = NULL;
    o->prefill = 1;
    o->timings = 0;
    for (int i = 1; i < argc; i++) {
        const char *flag = argv[i];
        const char *arg = i + 1 < argc ? argv[i + 1] : NULL;
        if (!arg) return mtc_error(err, len, "%s needs a value (see the usage at the top of main.c)", flag);
        i++;
        if (strcmp(flag, "--tokens") == 0) o->tokens = arg;
        else if (strcmp(flag, "--weights") == 0) o->weights = arg;
        else if (strcmp(flag, "--logits") == 0) o->logits = arg;
        else if (strcmp(flag, "--max-new-tokens") == 0) {
            if (mtc_int(arg, 0, MTP_CACHE_LEN, &value)) {
                return mtc_error(err, len, "--max-new-tokens must be an integer in 0..%d, got '%s'", MTP_CACHE_LEN, arg);
            }
            o->max_new = value;
        } else if (strcmp(flag, "--top-k") == 0) {
            if (mtc_int(arg, 1, MTP_VOCAB, &value)) {
                return mtc_error(err, len, "--top-k must be an integer in 1..%d (1: greedy), got '%s'", MTP_VOCAB, arg);
            }
            o->top_k = value;
        } else if (strcmp(flag, "--seed") == 0) {
            if (mtc_int(arg, 0, INT64_MAX, &value)) {
                return mtc_error(err, len, "--seed must be an integer >= 0, got '%s'", arg);
            }
            o->seed = (unsigned long long)value;
        } else if (strcmp(flag, "--threads") == 0) {
            if (mtc_int(arg, 1, 1024, &value)) {
                return mtc_error(err, len, "--threads must be an integer in 1..1024, got '%s'", arg);
            }
            o->threads = (int)value;
        } else if (strcmp(flag, "--prefill") == 0) {
            if (mtc_int(arg, 0, 1, &value)) {
                return mtc_error(err, len, "--prefill must be 1 (prompt in chunks) or 0 (token by token), got '%s'", arg);
            }
            o->prefill = (int)value;
        } else if (strcmp(flag, "--timings") == 0) {
            if (mtc_int(arg, 0, 1, &value)) {
                return mtc_error(err, len, "--timings must be 1 (print them on stderr) or 0, got '%s'", arg);
            }
            o->timings = (int)value;
        } else if (strcmp(flag, "--temperature") == 0) {
            if (mtc_positive(arg, &o->temperature)) {
                return mtc_error(err, len, "--temperature must be a number > 0, got '%s'", arg);
            }
        } else {
            return mtc_error(err, len, "unknown option '%s'; options: --tokens, --max-new-tokens, --top-k, --seed, "
                             "--temperature, --weights, --threads, --logits, --prefill, --timings", flag);
        }
    }
    if (!o->tokens) return mtc_error(err, len, "--tokens \"ID ID ...\" is required (the prompt's token ids)");
    return 0;
}

/* The prompt's token ids (space- or comma-separated) into ids[0..*count), each checked against the vocabulary.
 * Each id is read whole, however many characters it has (leading zeros included). */
static int parse_tokens(const char *text, int64_t *ids, long capacity, long *count, char *err, size_t len) {
    long n = 0;
    const char *p = text;
    for (;;) {
        while (*p == ' ' || *p == ',' || *p == '\t') p++;
        if (!*p) break;
        size_t w = strcspn(p, " ,\t");
        long long value;
        if (mtc_int_span(p, w, INT64_MIN, INT64_MAX, &value)) {
            int shown = w > 64 ? 64 : (int)w;
            return mtc_error(err, len, "--tokens: '%.*s%s' (token %ld) is not an integer in 0..%d", shown, p,
                             w > 64 ? "..." : "", n, MTP_VOCAB - 1);
        }
        if (value < 0 || value >= MTP_VOCAB) {
            return mtc_error(err, len, "--tokens: token id %lld (token %ld) is out of range 0..%d", value, n, MTP_VOCAB - 1);
        }
        if (n == capacity) {
            return mtc_error(err, len, "--tokens: more than %ld tokens (the export's cache holds %d positions)", capacity,
                             MTP_CACHE_LEN);
        }
        ids[n++] = value;
        p += w;
    }
    if (n == 0) return mtc_error(err, len, "--tokens: no token ids given");
    *count = n;
    return 0;
}

int main(int argc, char **argv) {
    char err[1024], path[4096];
    options o;
    int64_t prompt[MTP_CACHE_LEN];
    long length = 0;
    if (parse_options(argc, argv, &o, err, sizeof err)) return mtc_fail(PROGRAM, MTC_BAD_INPUT, "%s", err);
    if (parse_tokens(o.tokens, prompt, MTP_CACHE_LEN, &length, err, sizeof err))
        return mtc_fail(PROGRAM, MTC_BAD_INPUT, "%s", err);
    if (length + o.max_new - 1 > MTP_CACHE_LEN)
        return mtc_fail(PROGRAM, MTC_BAD_INPUT,
                        "a prompt of %ld tokens plus --max-new-tokens %lld needs %lld positions, the export's cache "
                        "holds %d (export again with a larger cache_len, at most the model's positions)",
                        length, o.max_new, length + o.max_new - 1, MTP_CACHE_LEN);
    if (o.max_new == 0) {
        printf("\n");
        return mtc_flush_stdout(PROGRAM);
    }
    if (mtc_weights_path(path, sizeof path, argv[0], o.weights))
        return mtc_fail(PROGRAM, MTC_BAD_INPUT, "the weights path is too long");
    gpt g;
    moment start = now();
    int prefill = o.prefill && length > 1;
    int status = gpt_open(&g, path, length + (long)o.max_new - 1, prefill, o.top_k > 1, err, sizeof err);
    if (status) return mtc_fail(PROGRAM, status, "%s", err);
    uint64_t rng = o.seed;
    int64_t token = 0;
    moment loaded = now();
    status = gpt_prompt(&g, prompt, length, prefill, o.threads, err, sizeof err);
    moment prompted = now();
    if (!status && o.logits) status = write_logits(g.logits, o.logits, err, sizeof err);
    for (long long i = 0; i < o.max_new && !status; i++) {
        token = o.top_k == 1 ? argmax(g.logits) : sample_top_k(&g, (long)o.top_k, o.temperature, &rng);
        printf(i ? " %lld" : "%lld", (long long)token);
        if (fflush(stdout) != 0) {
            snprintf(err, sizeof err, "cannot write the output (standard output: %s)", strerror(errno));
            status = MTC_FAILED;
        } else if (i + 1 < o.max_new) status = gpt_step(&g, token, length + i, o.threads, err, sizeof err);
    }
    if (o.timings && !status) {
        fprintf(stderr, "%s: timings: load ", PROGRAM);
        print_span(start, loaded);
        fprintf(stderr, "; prompt of %ld tokens %s ", length, prefill ? "in prefill steps" : "token by token");
        print_span(loaded, prompted);
        fprintf(stderr, "; %lld decode steps ", o.max_new - 1);
        print_span(prompted, now());
        fprintf(stderr, "\n");
    }
    gpt_free(&g);
    if (status) {
        printf("\n");
        return mtc_fail(PROGRAM, status, "%s", err);
    }
    printf("\n");
    return mtc_flush_stdout(PROGRAM);
}
