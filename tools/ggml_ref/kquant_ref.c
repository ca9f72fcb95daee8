// Runs ggml's reference K-quant encoders (ggml-quants.c from the pinned llama.cpp sources)
// on raw little-endian f32 input and writes one raw output file per format.
// Built and driven by tools/gen_kquant_goldens.py; never linked into fucina-rs.
//
// usage: kquant_ref IN.f32 OUTDIR
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ggml.h"
#include "ggml-quants.h"

// ggml-quants.c refers to these ggml.c helpers from code paths this tool never takes.
void ggml_abort(const char * file, int line, const char * fmt, ...) {
    fprintf(stderr, "ggml_abort at %s:%d (%s)\n", file, line, fmt);
    abort();
}
size_t ggml_row_size(enum ggml_type type, int64_t ne) { (void) type; (void) ne; abort(); }
size_t ggml_type_size(enum ggml_type type) { (void) type; abort(); }
const char * ggml_type_name(enum ggml_type type) { (void) type; abort(); }

typedef void (*quant_fn)(const float *, void *, int64_t);

static void run(const char * dir, const char * name, quant_fn f, size_t block_bytes, const float * x, size_t n) {
    size_t nb = n / 256;
    unsigned char * out = calloc(nb, block_bytes);
    f(x, out, (int64_t) n);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.bin", dir, name);
    FILE * fo = fopen(path, "wb");
    if (!fo || fwrite(out, block_bytes, nb, fo) != nb) { perror(path); exit(1); }
    fclose(fo);
    free(out);
}

int main(int argc, char ** argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s IN.f32 OUTDIR\n", argv[0]); return 2; }
    FILE * fi = fopen(argv[1], "rb");
    if (!fi) { perror(argv[1]); return 1; }
    fseek(fi, 0, SEEK_END);
    long len = ftell(fi);
    fseek(fi, 0, SEEK_SET);
    size_t n = (size_t) len / sizeof(float);
    if (n % 256 != 0) { fprintf(stderr, "input is not whole 256-value blocks\n"); return 1; }
    float * x = malloc(n * sizeof(float));
    if (fread(x, sizeof(float), n, fi) != n) { perror("read"); return 1; }
    fclose(fi);
    run(argv[2], "q2_k", (quant_fn) quantize_row_q2_K_ref, sizeof(block_q2_K), x, n);
    run(argv[2], "q3_k", (quant_fn) quantize_row_q3_K_ref, sizeof(block_q3_K), x, n);
    run(argv[2], "q4_k", (quant_fn) quantize_row_q4_K_ref, sizeof(block_q4_K), x, n);
    run(argv[2], "q5_k", (quant_fn) quantize_row_q5_K_ref, sizeof(block_q5_K), x, n);
    run(argv[2], "q6_k", (quant_fn) quantize_row_q6_K_ref, sizeof(block_q6_K), x, n);
    run(argv[2], "q8_k", (quant_fn) quantize_row_q8_K_ref, sizeof(block_q8_K), x, n);
    free(x);
    return 0;
}
