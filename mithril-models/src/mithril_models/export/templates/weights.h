/* Reader of the weights file of an exported Mithril program (written by mithril_models.export_program).
 *
 * Format (little-endian): a 64-byte file header, then `count` 128-byte tensor entries, then the data of
 * every weight at a 64-byte aligned offset (zero padding between tensors), so the file can be mapped
 * and the tensors used in place.
 *
 *   file header: char magic[8] = "MTWEIGHT"; u32 version = 1; u32 count; u64 data_offset (the end of the
 *                entries, a multiple of 64); u64 file_size; u64 checksum; 24 bytes zero
 *   entry:       char name[48] (NUL-terminated); u32 role (0 weight, 1 input); u32 dtype (1 float32,
 *                2 float64, 3 int64, 4 q8_0, 5 q4_0); u32 ndim (0..6); u32 zero; u64 shape[6]; u64 offset;
 *                u64 nbytes
 *   q8_0, q4_0:  block-quantized weights in ggml's layouts (a tensor [rows, ...] is rows of prod(shape[1:]) / 32
 *                blocks of 32 values: a half scale d, then 32 int8 (value d * q; 34 bytes) or 16 bytes of
 *                nibbles, value j low and j + 16 high (value d * (nibble - 8); 18 bytes))
 *   checksum:    sum over the 64-bit words w[i] of bytes [data_offset, file_size) of w[i] * (2 i + 1),
 *                modulo 2^64 (an order-sensitive check against truncated or damaged files)
 *
 * Entries of role "input" describe a data input of the program (its shape: e.g. the image of a
 * classifier) and hold no data (offset and nbytes 0). mtw_open checks every field read from the file
 * against the tensors the program was compiled for before any tensor is used. No global state: every
 * function works on the mtw_file it is given. */
#ifndef MITHRIL_EXPORT_WEIGHTS_H
#define MITHRIL_EXPORT_WEIGHTS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#define MTW_MMAP 1
#endif

#define MTW_HEADER 64
#define MTW_ENTRY 128
#define MTW_NAME 48
#define MTW_MAX_DIMS 6
enum { MTW_WEIGHT = 0, MTW_INPUT = 1 };
enum { MTW_F32 = 1, MTW_F64 = 2, MTW_I64 = 3, MTW_Q8_0 = 4, MTW_Q4_0 = 5 };

typedef struct {
    char name[MTW_NAME]; /* an array, not a pointer: the table needs no relocation (read-only data) */
    int role;
    int dtype;
    int ndim;
    int64_t shape[MTW_MAX_DIMS];
} mtw_expect;

typedef struct {
    unsigned char *base; /* the whole file (mapped, or read into memory) */
    size_t size;
    int mapped;
} mtw_file;

static void mtw_message(char *err, size_t len, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
}

static uint64_t mtw_u64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static uint32_t mtw_u32(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static size_t mtw_dtype_size(int dtype) {
    return dtype == MTW_F32 ? 4 : (dtype == MTW_F64 || dtype == MTW_I64) ? 8 : 0;
}

/* The bytes of the tensor the program expects (its sizes are compiled in: no overflow). */
static uint64_t mtw_expected_bytes(const mtw_expect *want) {
    uint64_t rows = want->ndim > 0 ? (uint64_t)want->shape[0] : 1, rest = 1;
    for (int d = 1; d < want->ndim; d++) rest *= (uint64_t)want->shape[d];
    if (want->dtype == MTW_Q8_0) return rows * (rest / 32) * 34;
    if (want->dtype == MTW_Q4_0) return rows * (rest / 32) * 18;
    return mtw_dtype_size(want->dtype) * rows * rest;
}

static int mtw_little_endian(void) {
    const uint32_t one = 1;
    unsigned char first;
    memcpy(&first, &one, 1);
    return first == 1;
}

/* The checksum of the data region (see the format above); the words are read in place. */
static uint64_t mtw_checksum(const unsigned char *data, size_t nbytes) {
    uint64_t sum = 0;
    size_t words = nbytes / 8;
    for (size_t i = 0; i < words; i++) {
        uint64_t word; /* the host is little-endian (checked first) */
        memcpy(&word, data + 8 * i, 8);
        sum += word * (2 * (uint64_t)i + 1);
    }
    return sum;
}

static void mtw_close(mtw_file *f) {
    if (!f->base) return;
#ifdef MTW_MMAP
    if (f->mapped) munmap(f->base, f->size);
    else free(f->base);
#else
    free(f->base);
#endif
    f->base = NULL;
}

static int mtw_load(mtw_file *f, const char *path, char *err, size_t len) {
    f->base = NULL;
    f->size = 0;
    f->mapped = 0;
#ifdef MTW_MMAP
    int fd = open(path, O_RDONLY);
    if (fd < 0) { mtw_message(err, len, "cannot open the weights file %s", path); return 1; }
    struct stat st;
    if (fstat(fd, &st) != 0 || st.st_size < MTW_HEADER) {
        close(fd);
        mtw_message(err, len, "the weights file %s is shorter than its %d-byte header", path, MTW_HEADER);
        return 1;
    }
    void *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (map == MAP_FAILED) { mtw_message(err, len, "cannot map the weights file %s", path); return 1; }
    f->base = map;
    f->size = (size_t)st.st_size;
    f->mapped = 1;
#else
    FILE *in = fopen(path, "rb");
    if (!in) { mtw_message(err, len, "cannot open the weights file %s", path); return 1; }
    long end = (fseek(in, 0, SEEK_END) == 0) ? ftell(in) : -1;
    if (end < MTW_HEADER || fseek(in, 0, SEEK_SET) != 0) {
        fclose(in);
        mtw_message(err, len, "the weights file %s is shorter than its %d-byte header", path, MTW_HEADER);
        return 1;
    }
    f->base = malloc((size_t)end);
    f->size = (size_t)end;
    if (!f->base || fread(f->base, 1, f->size, in) != f->size) {
        fclose(in);
        mtw_close(f);
        mtw_message(err, len, "cannot read the %ld bytes of the weights file %s", end, path);
        return 1;
    }
    fclose(in);
#endif
    return 0;
}

static void mtw_shape_text(char *out, size_t len, int ndim, const int64_t *shape) {
    size_t used = 0;
    out[0] = '\0';
    used += (size_t)snprintf(out, len, "[");
    for (int d = 0; d < ndim && used < len; d++)
        used += (size_t)snprintf(out + used, len - used, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (used < len) snprintf(out + used, len - used, "]");
}

/* Check one entry against what the program expects; set tensors[i] to its data (NULL for inputs). */
static int mtw_check_entry(const mtw_file *f, size_t i, const mtw_expect *want, uint64_t data_offset,
                           uint64_t *next_free, const void **tensor, char *err, size_t len) {
    const unsigned char *e = f->base + MTW_HEADER + i * MTW_ENTRY;
    char name[MTW_NAME + 1], got_shape[160], want_shape[160];
    memcpy(name, e, MTW_NAME);
    name[MTW_NAME] = '\0';
    if (memchr(e, '\0', MTW_NAME) == NULL || strcmp(name, want->name) != 0) {
        mtw_message(err, len, "tensor %zu is named '%.48s' in the weights file, the program expects '%s'", i, name,
                    want->name);
        return 1;
    }
    uint32_t role = mtw_u32(e + 48), dtype = mtw_u32(e + 52), ndim = mtw_u32(e + 56);
    if (role != (uint32_t)want->role || dtype != (uint32_t)want->dtype) {
        mtw_message(err, len, "tensor '%s' has role %u and dtype code %u in the weights file, the program expects %d and %d",
                    want->name, role, dtype, want->role, want->dtype);
        return 1;
    }
    int64_t shape[MTW_MAX_DIMS] = {0};
    int same = ndim == (uint32_t)want->ndim;
    for (int d = 0; d < MTW_MAX_DIMS; d++) {
        uint64_t dim = mtw_u64(e + 64 + 8 * d);
        shape[d] = dim > (uint64_t)INT64_MAX ? -1 : (int64_t)dim;
        if (d < want->ndim && shape[d] != want->shape[d]) same = 0;
    }
    if (!same) {
        mtw_shape_text(got_shape, sizeof got_shape, ndim <= MTW_MAX_DIMS ? (int)ndim : MTW_MAX_DIMS, shape);
        mtw_shape_text(want_shape, sizeof want_shape, want->ndim, want->shape);
        mtw_message(err, len, "tensor '%s' has shape %s (%u dims) in the weights file, the program expects %s",
                    want->name, got_shape, ndim, want_shape);
        return 1;
    }
    uint64_t offset = mtw_u64(e + 112), nbytes = mtw_u64(e + 120);
    uint64_t expect_bytes = mtw_expected_bytes(want);
    *tensor = NULL;
    if (want->role == MTW_INPUT) {
        if (offset != 0 || nbytes != 0) {
            mtw_message(err, len, "input '%s' claims %llu bytes of data in the weights file, expected none", want->name,
                        (unsigned long long)nbytes);
            return 1;
        }
        return 0;
    }
    if (nbytes != expect_bytes || offset % 64 != 0 || offset < data_offset || offset < *next_free ||
        offset > f->size || nbytes > f->size - offset) {
        mtw_message(err, len,
                    "tensor '%s' claims %llu bytes at offset %llu of the weights file; expected %llu bytes at a 64-byte "
                    "aligned offset after the previous tensor, inside the file's %zu bytes",
                    want->name, (unsigned long long)nbytes, (unsigned long long)offset,
                    (unsigned long long)expect_bytes, f->size);
        return 1;
    }
    *next_free = offset + nbytes;
    *tensor = f->base + offset;
    return 0;
}

/* Map the weights file at `path` and check it against the `count` tensors the program expects; on
 * success tensors[i] points at the data of tensor i (NULL for inputs). Returns 0, or 1 with a one-line
 * message in err (the file is then closed). */
static int mtw_open(mtw_file *f, const char *path, const mtw_expect *expect, size_t count, const void **tensors,
                    char *err, size_t len) {
    char detail[512];
    if (!mtw_little_endian()) {
        mtw_message(err, len, "this program reads little-endian weights and the machine is big-endian");
        return 1;
    }
    if (mtw_load(f, path, err, len)) return 1;
    const unsigned char *h = f->base;
    uint64_t data_offset = mtw_u64(h + 16), file_size = mtw_u64(h + 24), checksum = mtw_u64(h + 32);
    uint32_t version = mtw_u32(h + 8), entries = mtw_u32(h + 12);
    uint64_t want_offset = ((MTW_HEADER + (uint64_t)count * MTW_ENTRY) + 63) / 64 * 64;
    detail[0] = '\0';
    if (memcmp(h, "MTWEIGHT", 8) != 0) snprintf(detail, sizeof detail, "it does not start with MTWEIGHT");
    else if (version != 1) snprintf(detail, sizeof detail, "format version %u, this program reads version 1", version);
    else if (entries != count)
        snprintf(detail, sizeof detail, "it holds %u tensors, the program expects %zu", entries, count);
    else if (file_size != f->size)
        snprintf(detail, sizeof detail, "its header says %llu bytes, the file has %zu (truncated or extended?)",
                 (unsigned long long)file_size, f->size);
    else if (data_offset != want_offset || data_offset > f->size || (f->size - data_offset) % 8 != 0)
        snprintf(detail, sizeof detail, "its data starts at %llu, expected %llu with whole 8-byte words after it",
                 (unsigned long long)data_offset, (unsigned long long)want_offset);
    if (detail[0]) {
        mtw_message(err, len, "%s is not a weights file of this program: %s", path, detail);
        mtw_close(f);
        return 1;
    }
    uint64_t next_free = data_offset;
    for (size_t i = 0; i < count; i++) {
        if (mtw_check_entry(f, i, &expect[i], data_offset, &next_free, &tensors[i], detail, sizeof detail)) {
            mtw_message(err, len, "%s: %s", path, detail);
            mtw_close(f);
            return 1;
        }
    }
    uint64_t got = mtw_checksum(f->base + data_offset, f->size - data_offset);
    if (got != checksum) {
        mtw_message(err, len, "%s: checksum %016llx of the data differs from %016llx in the header (damaged file)", path,
                    (unsigned long long)got, (unsigned long long)checksum);
        mtw_close(f);
        return 1;
    }
    return 0;
}

#endif
