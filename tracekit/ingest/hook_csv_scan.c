/* The hook CSV row scan of tracekit/ingest/hook_csv_scan.py (whose docstring says what it
 * accepts and why): a block of rows in, their values as columns and the block's distinct
 * strings out, or a refusal of the whole block. Plain C99, no Python C API: loaded with ctypes. */

#include <stdint.h>
#include <string.h>

/* The output columns: WIDE_FIELDS (int64) and NARROW_FIELDS (32 bits) of hook_csv_scan.py. */
enum { PID, SEQ, COUNT, BYTES, T_START_NS, T_END_NS };
enum { RANK, CUDA_DEV, NRANKS, PEER, HOST_ID, COMM_ID, OP_ID, DATATYPE };
/* KIND_HOST ... KIND_OP of hook_csv_scan.py: which fields a distinct string was read from. */
enum { KIND_HOST = 1, KIND_COMM = 2, KIND_OP = 4 };
/* What a null peer or end time is written as (both are non-negative when known). */
#define UNKNOWN (-1)
#define REFUSED (-1)
#define FULL (-2)
#define INT32_LIMIT INT64_C(2147483647)

/* The block and the scan's outputs: the columns (`capacity` values each), the distinct strings
 * as rows of (offset, length, hash, kinds), their open-addressing table of -1 or ids. */
typedef struct {
    const uint8_t *data;
    int64_t size;
    int64_t **wide;
    int32_t **narrow;
    int64_t *strings;
    int64_t max_strings;
    int64_t *table;
    int64_t table_mask;
    int64_t used;
} Scan;

#define WIDE(scan, field, row) ((scan)->wide[field][row])
#define NARROW(scan, field, row) ((scan)->narrow[field][row])

/* Where the compiler has the builtins and bytes are little-endian, numbers and texts are read
 * eight bytes at a time (SWAR: SIMD within a register), a third of the CPU of a byte at a time;
 * elsewhere, and in the last bytes of a block, a byte at a time, with the same results. */
#if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
#define WORDS 1
#else
#define WORDS 0
#endif
/* The helpers of the row loop, inlined into it even where the compiler's size heuristics would
 * not (a tenth of the scan's CPU). */
#if defined(__GNUC__)
#define HOT __attribute__((always_inline)) static inline
#else
#define HOT static inline
#endif
#define ONES UINT64_C(0x0101010101010101)
#define HIGHS UINT64_C(0x8080808080808080)
/* The high bit of each byte of x below n (n <= 128); exact up to the first such byte (a borrow
 * may flag later ones), which is all the scan reads. */
#define BELOW(x, n) (((x) - ONES * (n)) & ~(x) & HIGHS)
#define MIX UINT64_C(0x9E3779B97F4A7C15)

static const uint64_t POWERS_OF_TEN[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000,
                                          100000000};

HOT uint64_t word_at(const uint8_t *data, int64_t pos)
{
    uint64_t word;
    memcpy(&word, data + pos, sizeof word);
    return word;
}

/* The high bit of each byte of word that is not a decimal digit (exact: no carries). */
HOT uint64_t non_digits(uint64_t word)
{
    uint64_t values = word ^ (ONES * '0');  /* digits become 0-9 */
    return (((values & ~HIGHS) + ONES * (0x80 - 10)) | values) & HIGHS;
}

/* The value of the digits in the high bytes of word (the first digit lowest), the low bytes
 * zero: three multiplies for eight digits. */
HOT uint64_t eight_digits(uint64_t word)
{
    word = ((word & (ONES * 0x0F)) * (1 + (10 << 8))) >> 8;
    word = ((word & UINT64_C(0x00FF00FF00FF00FF)) * (1 + (100 << 16))) >> 16;
    return ((word & UINT64_C(0x0000FFFF0000FFFF)) * (1 + (UINT64_C(10000) << 32))) >> 32;
}

/* The high bit of each byte of word that ends a text field or may not be in one: a comma, a
 * control character or space, '"' or '#' (0x22, 0x23), DEL and anything above ASCII. */
HOT uint64_t text_stops(uint64_t word)
{
    return (word & HIGHS) | (((word & ~HIGHS) + ONES) & HIGHS) | BELOW(word, 0x21)
           | BELOW(word ^ (ONES * ','), 1) | BELOW(word ^ (ONES * '"'), 2);
}

/* The position after the decimal integer at pos, its value in *value; -1 unless it is 1 to 19
 * digits without a leading zero (or "0"), within int64, with a minus sign only when negative_ok
 * (and not "-0"). Whatever the CSV reader might also accept (a plus sign, spaces, leading
 * zeros) is refused: the block then goes to the polars path. */
HOT int64_t integer(const Scan *scan, int64_t pos, int negative_ok, int64_t *value)
{
    const uint8_t *data = scan->data;
    int negative = negative_ok && pos < scan->size && data[pos] == '-';
    uint64_t number = 0;
    pos += negative;
    int64_t start = pos;
#if WORDS
    while (pos + 8 <= scan->size) {
        uint64_t word = word_at(data, pos), stops = non_digits(word);
        int64_t digits = stops ? __builtin_ctzll(stops) >> 3 : 8;
        if (pos - start + digits > 19)
            return REFUSED;
        if (digits > 0)
            number = number * POWERS_OF_TEN[digits] + eight_digits(word << (64 - 8 * digits));
        pos += digits;
        if (digits < 8)
            goto read;
    }
#endif
    for (; pos < scan->size && data[pos] >= '0' && data[pos] <= '9'; pos++) {
        if (pos - start == 19)
            return REFUSED;
        number = number * 10 + (uint64_t)(data[pos] - '0');
    }
#if WORDS
read:
#endif
    if (pos == start || (data[start] == '0' && pos - start > 1) || number > (uint64_t)INT64_MAX
        || (negative && number == 0))
        return REFUSED;
    *value = negative ? -(int64_t)number : (int64_t)number;
    return pos;
}

/* The position after the field separator at pos, else -1. */
HOT int64_t comma(const Scan *scan, int64_t pos)
{
    return pos >= 0 && pos < scan->size && scan->data[pos] == ',' ? pos + 1 : REFUSED;
}

/* The position after a required non-negative integer field and its separator (at most limit). */
HOT int64_t count_field(const Scan *scan, int64_t pos, int64_t limit, int64_t *value)
{
    if (pos < 0)
        return REFUSED;
    pos = integer(scan, pos, 0, value);
    return pos >= 0 && *value <= limit ? comma(scan, pos) : REFUSED;
}

/* The end of the text at pos (printable ASCII but space, '"' and '#', maybe empty): the
 * position of the first byte that is none of those; its hash (of its length and its bytes,
 * eight at a time) in *hashed when hashed is not NULL. */
HOT int64_t text_end(const Scan *scan, int64_t pos, uint64_t *hashed)
{
    const uint8_t *data = scan->data;
    int64_t start = pos;
    uint64_t hash = 0, word = 0;
#if WORDS
    while (pos + 8 <= scan->size) {
        uint64_t stops;
        word = word_at(data, pos);
        stops = text_stops(word);
        if (stops) {
            int64_t length = __builtin_ctzll(stops) >> 3;
            word = length ? word & (~UINT64_C(0) >> (64 - 8 * length)) : 0;
            pos += length;
            goto read;
        }
        if (hashed)
            hash = (hash ^ word) * MIX;
        pos += 8;
    }
    word = 0;
#endif
    for (; pos < scan->size; pos++) {
        uint8_t byte = data[pos];
        if (byte <= ' ' || byte > '~' || byte == ',' || byte == '"' || byte == '#')
            break;
        word |= (uint64_t)byte << (8 * ((pos - start) & 7));
        if (((pos - start) & 7) == 7) {
            hash = (hash ^ word) * MIX;
            word = 0;
        }
    }
#if WORDS
read:
#endif
    if (hashed) {
        hash = (hash ^ word ^ (uint64_t)(pos - start)) * MIX;
        *hashed = hash ^ (hash >> 32);
    }
    return pos;
}

/* The position after a free-text field (maybe empty) and its separator, else -1. */
HOT int64_t text_field(const Scan *scan, int64_t pos)
{
    return pos < 0 ? REFUSED : comma(scan, text_end(scan, pos, NULL));
}

/* Whether the texts at a and b of length bytes are the same (a call of memcmp for a dozen bytes
 * cost more than the scan of them). */
HOT int same_text(const uint8_t *a, const uint8_t *b, int64_t length)
{
    int64_t k = 0;
    for (; k + 8 <= length; k += 8)
        if (word_at(a, k) != word_at(b, k))
            return 0;
    for (; k < length; k++)
        if (a[k] != b[k])
            return 0;
    return 1;
}

/* The position after a text field and its separator, as text_field, its id among the block's
 * distinct strings in *id (kind marks the field it was read from). */
HOT int64_t string_field(Scan *scan, int64_t pos, int64_t kind, int64_t *id)
{
    uint64_t hashed;
    int64_t start = pos, stop, slot, length, found, key;
    if (pos < 0)
        return REFUSED;
    stop = text_end(scan, pos, &hashed);
    length = stop - start;
    key = (int64_t)(hashed >> 1);
    for (slot = key & scan->table_mask;; slot = (slot + 1) & scan->table_mask) {
        found = scan->table[slot];
        if (found < 0) {
            if (scan->used == scan->max_strings)
                return REFUSED;
            found = scan->used++;
            scan->strings[4 * found] = start;
            scan->strings[4 * found + 1] = length;
            scan->strings[4 * found + 2] = key;
            scan->strings[4 * found + 3] = 0;
            scan->table[slot] = found;
            break;
        }
        if (scan->strings[4 * found + 2] == key && scan->strings[4 * found + 1] == length
            && same_text(scan->data + scan->strings[4 * found], scan->data + start, length))
            break;
    }
    scan->strings[4 * found + 3] |= kind;
    *id = found;
    return comma(scan, stop);
}

/* The position after an optional integer field (empty reads as UNKNOWN, as any negative value
 * must for the tables), at the separator or line end that follows it. */
HOT int64_t optional_field(const Scan *scan, int64_t pos, int64_t *value)
{
    if (pos < 0)
        return REFUSED;
    if (pos == scan->size || scan->data[pos] == ',' || scan->data[pos] == '\n'
        || scan->data[pos] == '\r') {
        *value = UNKNOWN;
        return pos;
    }
    return integer(scan, pos, 1, value);
}

/* The position after the line end ("\n", "\r\n", or none at the block's end) at pos, else -1. */
HOT int64_t line_end(const Scan *scan, int64_t pos)
{
    if (pos < 0 || pos == scan->size)
        return pos;
    if (scan->data[pos] == '\r')
        pos++;
    return pos < scan->size && scan->data[pos] == '\n' ? pos + 1 : REFUSED;
}

/* Read the row at start into column row; the position after its line end, or -1 unless it is
 * exactly the hook CSV shape (16 fields) with every value in range and a known datatype. */
static int64_t row_at(Scan *scan, int64_t start, int64_t row, const int64_t *dtype_bytes,
                      int64_t dtype_codes)
{
    int64_t ignored, duration, t_call, host, pid, rank, device, comm, nranks, seq, op, count,
        datatype, peer;
    int64_t pos = count_field(scan, start, INT64_MAX, &ignored);              /* event_id */
    pos = count_field(scan, pos, INT64_MAX, &t_call);
    pos = comma(scan, optional_field(scan, pos, &duration));
    pos = string_field(scan, pos, KIND_HOST, &host);
    pos = count_field(scan, pos, INT64_MAX, &pid);
    pos = count_field(scan, pos, INT32_LIMIT, &rank);
    pos = count_field(scan, pos, INT32_LIMIT, &device);
    pos = string_field(scan, pos, KIND_COMM, &comm);
    pos = count_field(scan, pos, INT32_LIMIT, &nranks);
    pos = count_field(scan, pos, INT64_MAX, &seq);
    pos = string_field(scan, pos, KIND_OP, &op);
    pos = count_field(scan, pos, INT64_MAX, &count);
    pos = count_field(scan, pos, dtype_codes - 1, &datatype);
    pos = text_field(scan, pos);                                              /* sendbuff */
    pos = text_field(scan, pos);                                              /* recvbuff */
    pos = line_end(scan, optional_field(scan, pos, &peer));
    if (pos < 0 || dtype_bytes[datatype] <= 0 || count > INT64_MAX / dtype_bytes[datatype]
        || peer < -INT32_LIMIT - 1 || peer > INT32_LIMIT
        || (duration >= 0 && t_call > INT64_MAX - duration))
        return REFUSED;
    WIDE(scan, PID, row) = pid;
    WIDE(scan, SEQ, row) = seq;
    WIDE(scan, COUNT, row) = count;
    WIDE(scan, BYTES, row) = count * dtype_bytes[datatype];
    WIDE(scan, T_START_NS, row) = t_call;
    WIDE(scan, T_END_NS, row) = duration < 0 ? UNKNOWN : t_call + duration;
    NARROW(scan, RANK, row) = (int32_t)rank;
    NARROW(scan, CUDA_DEV, row) = (int32_t)device;
    NARROW(scan, NRANKS, row) = (int32_t)nranks;
    NARROW(scan, PEER, row) = peer < 0 ? UNKNOWN : (int32_t)peer;
    NARROW(scan, HOST_ID, row) = (int32_t)host;
    NARROW(scan, COMM_ID, row) = (int32_t)comm;
    NARROW(scan, OP_ID, row) = (int32_t)op;
    NARROW(scan, DATATYPE, row) = (int32_t)datatype;
    return pos;
}

/* Scan data[0:size], whole rows, the last one maybe without its line end. The caller
 * allocates: the columns wide (6 of int64) and narrow (8 of 32 bits), capacity values each;
 * strings (max_strings x 4); table (2 * max_strings, a power of two, all -1). dtype_bytes[code]
 * is a datatype's element size, 0 when unknown. Returns the number of rows, -1 when any line is
 * not a well-formed row (or there are more strings than max_strings), -2 when there are more
 * rows than capacity; *strings_used receives the number of distinct strings. */
int64_t hook_csv_scan(const uint8_t *data, int64_t size, const int64_t *dtype_bytes,
                      int64_t dtype_codes, int64_t **wide, int32_t **narrow, int64_t capacity,
                      int64_t *strings, int64_t max_strings, int64_t *table,
                      int64_t *strings_used)
{
    Scan scan = {data, size, wide, narrow, strings, max_strings, table, 2 * max_strings - 1, 0};
    int64_t rows = 0, pos = 0;
    while (pos < size) {
        if (rows == capacity)
            return FULL;
        pos = row_at(&scan, pos, rows, dtype_bytes, dtype_codes);
        if (pos < 0)
            return REFUSED;
        rows++;
    }
    *strings_used = scan.used;
    return rows;
}
