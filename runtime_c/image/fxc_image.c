/* ImageDecoder's run-time half: encoded bytes -> an HxWxC uint8 image, by stb_image (Debian's libstb-dev,
 * public domain / MIT; only its JPEG, PNG, BMP, PNM and GIF decoders are compiled). Untrusted input: the header's
 * dimensions are checked against the caller's bound before stb allocates anything, a truncated file is refused
 * (stb would decode it padded), and every failure returns 1 with nothing written
 * past out[max_h * max_w * channels]. SIMD is off so every board decodes to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define STBI_ONLY_JPEG
#define STBI_ONLY_PNG
#define STBI_ONLY_BMP
#define STBI_ONLY_PNM
#define STBI_ONLY_GIF
#define STBI_NO_STDIO
#define STBI_NO_LINEAR
#define STBI_NO_HDR
#define STBI_NO_SIMD
#define STBI_NO_FAILURE_STRINGS
#define STBI_MAX_DIMENSIONS (1 << 16)
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#if defined(__clang__) || defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wunused-function" /* reported at the end of the file: stb's static API we do not call */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wimplicit-fallthrough"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wunused-but-set-variable"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#endif
#include <stb_image.h>
#if defined(__clang__) || defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

int fxc_image_decode(const uint8_t *data, int64_t len, uint8_t *out, int64_t max_h, int64_t max_w, int64_t channels,
                     int64_t bgr, int64_t exact, int64_t *dims);

/* Checks before stb sees the bytes. stb reads past the end of the data as zeros, so a cut file would decode with grey
 * or black rows: a JPEG needs its end marker, a GIF its trailer, BMP and PNM the pixel bytes their header implies
 * (PNG's CRCs and zlib stream already fail a cut file in stb). A JPEG's segments are walked (lengths within the data,
 * entropy-coded data skipped to the next marker) and its Huffman tables must hold at most 256 codes: stb 2.27 writes
 * past its tables otherwise (found by tests/test_image_decoder.py's fuzzing under UBSan). Each returns 1 for
 * another format. */
static int dht_ok(const uint8_t *p, int64_t left) {
    while (left > 0) {
        if (left < 17 || (p[0] >> 4) > 1 || (p[0] & 15) > 3) return 0;
        int64_t n = 0;
        for (int i = 1; i <= 16; i++) n += p[i];
        if (n > 256 || 17 + n > left) return 0;
        p += 17 + n;
        left -= 17 + n;
    }
    return 1;
}

static int jpeg_ok(const uint8_t *data, int64_t len) {
    if (len < 4 || data[0] != 0xFF || data[1] != 0xD8) return 1;
    int64_t i = 2;
    int scans = 0;
    while (i + 1 < len) {
        uint8_t m = data[i + 1];
        if (data[i] != 0xFF) return 0;
        if (m == 0xFF) { i += 1; continue; }
        if (m == 0xD9) return scans > 0;
        if (m == 0x01 || (m >= 0xD0 && m <= 0xD8)) { i += 2; continue; }
        if (i + 4 > len) return 0;
        int64_t seg = (int64_t)data[i + 2] << 8 | data[i + 3];
        if (seg < 2 || i + 2 + seg > len) return 0;
        if (m == 0xC4 && !dht_ok(data + i + 4, seg - 2)) return 0;
        i += 2 + seg;
        if (m == 0xDA) {
            scans++;
            while (i + 1 < len && !(data[i] == 0xFF && data[i + 1] != 0 && (data[i + 1] < 0xD0 || data[i + 1] > 0xD7))) i++;
        }
    }
    return 0;
}

/* A PNG's chunks must lie within the data, and no IDAT chunk may be empty (stb copies an empty one through a null
 * pointer, undefined behaviour UBSan reports). */
static int png_ok(const uint8_t *data, int64_t len) {
    static const uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (len < 8 || memcmp(data, signature, 8) != 0) return 1;
    int64_t i = 8;
    while (i + 8 <= len) {
        int64_t n = (int64_t)data[i] << 24 | (int64_t)data[i + 1] << 16 | (int64_t)data[i + 2] << 8 | data[i + 3];
        if (n > len - i - 12) return 0;
        if (n == 0 && memcmp(data + i + 4, "IDAT", 4) == 0) return 0;
        if (memcmp(data + i + 4, "IEND", 4) == 0) return 1;
        i += 12 + n;
    }
    return 0;
}

static int gif_complete(const uint8_t *data, int64_t len) {
    return len < 6 || memcmp(data, "GIF8", 4) != 0 || data[len - 1] == 0x3B;
}

static int pnm_complete(const uint8_t *data, int64_t len, int w, int h) {
    if (len < 2 || data[0] != 'P' || (data[1] != '5' && data[1] != '6')) return 1;
    int64_t i = 2;
    uint64_t maxval = 0;
    for (int k = 0; k < 3; k++) {
        for (;;) {
            while (i < len && (data[i] == ' ' || (data[i] >= '\t' && data[i] <= '\r'))) i++;
            if (i < len && data[i] == '#') {
                while (i < len && data[i] != '\n' && data[i] != '\r') i++;
                continue;
            }
            break;
        }
        uint64_t v = 0;
        while (i < len && data[i] >= '0' && data[i] <= '9' && v < 1000000) v = v * 10 + (uint64_t)(data[i++] - '0');
        maxval = v;
    }
    uint64_t sample = maxval > 255 ? 2 : 1, comp = data[1] == '6' ? 3 : 1;
    return (uint64_t)i + 1 + (uint64_t)w * (uint64_t)h * comp * sample <= (uint64_t)len;
}

static uint32_t le(const uint8_t *p, int bytes) {
    uint32_t v = 0;
    for (int i = bytes - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static int bmp_complete(const uint8_t *data, int64_t len, int w, int h) {
    if (len < 2 || data[0] != 'B' || data[1] != 'M') return 1;
    if (len < 18) return 0;
    uint32_t header = le(data + 14, 4);
    if (len < (header == 12 ? 26 : 30)) return 0;
    uint32_t bpp = header == 12 ? le(data + 24, 2) : le(data + 28, 2);
    uint64_t row = (((uint64_t)w * bpp + 31) / 32) * 4;
    return (uint64_t)le(data + 10, 4) + row * (uint64_t)h <= (uint64_t)len;
}

/* Decode data[0, len) into out (row-major H x W x channels, channels 3: RGB, or BGR when bgr; 1: ITU-R 601-2 luma
 * of the RGB pixels, as PIL's convert("L")); dims gets {H, W, channels}. exact: the image must be max_h x max_w;
 * else at most that. Returns 0, or 1 (dims {0, 0, channels}) when the bytes are not an image of a compiled
 * format, are corrupt or truncated, or exceed the bound. */
int fxc_image_decode(const uint8_t *data, int64_t len, uint8_t *out, int64_t max_h, int64_t max_w, int64_t channels,
                     int64_t bgr, int64_t exact, int64_t *dims) {
    int w = 0, h = 0, comp = 0;
    dims[0] = 0;
    dims[1] = 0;
    dims[2] = channels;
    if (len <= 0 || len > INT32_MAX || (channels != 1 && channels != 3)) return 1;
    if (!jpeg_ok(data, len) || !png_ok(data, len) || !gif_complete(data, len)) return 1;
    if (!stbi_info_from_memory(data, (int)len, &w, &h, &comp) || w <= 0 || h <= 0) return 1;
    if (exact ? (h != max_h || w != max_w) : (h > max_h || w > max_w)) return 1;
    if (!bmp_complete(data, len, w, h) || !pnm_complete(data, len, w, h)) return 1;
    int dw = 0, dh = 0;
    unsigned char *rgb = stbi_load_from_memory(data, (int)len, &dw, &dh, &comp, 3);
    if (rgb == NULL) return 1;
    if (dw != w || dh != h) {
        stbi_image_free(rgb);
        return 1;
    }
    size_t pixels = (size_t)w * (size_t)h;
    if (channels == 3 && !bgr) {
        memcpy(out, rgb, pixels * 3);
    } else if (channels == 3) {
        for (size_t i = 0; i < pixels; i++) {
            out[3 * i] = rgb[3 * i + 2];
            out[3 * i + 1] = rgb[3 * i + 1];
            out[3 * i + 2] = rgb[3 * i];
        }
    } else {
        for (size_t i = 0; i < pixels; i++)
            out[i] = (uint8_t)((rgb[3 * i] * 19595u + rgb[3 * i + 1] * 38470u + rgb[3 * i + 2] * 7471u + 0x8000u) >> 16);
    }
    stbi_image_free(rgb);
    dims[0] = h;
    dims[1] = w;
    return 0;
}
