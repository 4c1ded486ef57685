/* Command-line helpers shared by the exported programs (generate, classify): strict number parsing, the
 * default weights path, one-line error messages and checked output. No global state. */
#ifndef MITHRIL_EXPORT_CLI_H
#define MITHRIL_EXPORT_CLI_H

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MTC_BAD_INPUT 2 /* exit status on bad input (arguments, weights file, input file) */
#define MTC_FAILED 1    /* exit status when the model could not run (out of memory, index check) */

/* Print "<program>: <message>" as one line on stderr and return `status`. */
static int mtc_fail(const char *program, int status, const char *fmt, ...) {
    char message[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    for (char *c = message; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    fprintf(stderr, "%s: %s\n", program, message);
    return status;
}

/* Write the message into `err` (`len` bytes) and return 1: what a parser answers to bad input. */
static int mtc_error(char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return 1;
}

/* Parse exactly the `n` characters at `text` (decimal digits after an optional sign, any number of them, nothing
 * else) into lo..hi. The text after them must not continue the number (a separator or the end of the string). */
static int mtc_int_span(const char *text, size_t n, long long lo, long long hi, long long *out) {
    char *end = NULL;
    if (!text || n == 0 || !(*text == '-' || *text == '+' || (*text >= '0' && *text <= '9'))) return 1;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end != text + n || value < lo || value > hi) return 1;
    *out = value;
    return 0;
}

/* Parse all of `text` (decimal, optional sign, surrounding spaces not allowed) into lo..hi. */
static int mtc_int(const char *text, long long lo, long long hi, long long *out) {
    return !text || mtc_int_span(text, strlen(text), lo, hi, out);
}

/* Flush standard output: 0, or MTC_FAILED with a message when what was printed could not be written (a full
 * disk, a closed pipe). */
static int mtc_flush_stdout(const char *program) {
    int failed = fflush(stdout) != 0, code = errno;
    if (!failed && !ferror(stdout)) return 0;
    return mtc_fail(program, MTC_FAILED, "cannot write the output (standard output%s%s)", failed ? ": " : "",
                    failed ? strerror(code) : "");
}

/* `given`, else weights.bin next to the program (the directory of argv[0]), else in the current directory. */
static int mtc_weights_path(char *out, size_t len, const char *argv0, const char *given) {
    if (given) return snprintf(out, len, "%s", given) >= (int)len;
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    if (!slash) return snprintf(out, len, "weights.bin") >= (int)len;
    return snprintf(out, len, "%.*s/weights.bin", (int)(slash - argv0), argv0) >= (int)len;
}

#endif
