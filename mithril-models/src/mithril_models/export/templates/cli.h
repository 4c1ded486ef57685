/* Command-line helpers shared by the exported programs (generate, classify): strict number parsing, the
 * default weights path and one-line error messages. No global state. */
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

/* Parse all of `text` (decimal, optional sign, surrounding spaces not allowed) into lo..hi. */
static int mtc_int(const char *text, long long lo, long long hi, long long *out) {
    char *end = NULL;
    if (!text || !*text || *text == ' ') return 1;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || value < lo || value > hi) return 1;
    *out = value;
    return 0;
}

/* `given`, else weights.bin next to the program (the directory of argv[0]), else in the current directory. */
static int mtc_weights_path(char *out, size_t len, const char *argv0, const char *given) {
    if (given) return snprintf(out, len, "%s", given) >= (int)len;
    const char *slash = argv0 ? strrchr(argv0, '/') : NULL;
    if (!slash) return snprintf(out, len, "weights.bin") >= (int)len;
    return snprintf(out, len, "%.*s/weights.bin", (int)(slash - argv0), argv0) >= (int)len;
}

#endif
