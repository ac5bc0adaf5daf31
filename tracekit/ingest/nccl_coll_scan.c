/* The NCCL COLL line scan of tracekit/ingest/nccl_coll_scan.py (whose docstring says what it
 * accepts and why): a block of whole lines in, the accepted lines' numbers, the block's distinct
 * strings and the other lines' bytes out. Plain C99, no Python C API: loaded with ctypes. */

#include <stdint.h>
#include <string.h>

/* The small readers of numbers and tokens, inlined where the compiler allows it: GCC kept
 * them as calls, six to nine a line. */
#if defined(__GNUC__)
#define HOT_INLINE static inline __attribute__((always_inline))
#else
#define HOT_INLINE static inline
#endif

/* The wide (int64) and narrow (int32) fields, one array of `capacity` each: the order of
 * WIDE_FIELDS and NARROW_FIELDS in nccl_coll_scan.py. */
enum { PID, OP_COUNT, COUNT, TS_SECONDS };
enum { LINE_INDEX, KEY, CALL_INDEX, CUDA_DEV, OP_ID, DATATYPE, ROOT, NRANKS, GLOBAL_RANK,
       TS_KIND, TS_OFFSET_S, TS_FRAC_NS };
/* Columns of a key's row (KEY_COLUMNS: KEY_FIELDS of nccl_coll_scan.py, then its group's row)
 * and of a group's (the first three and the calls). */
enum { KEY_HOST, KEY_PID, KEY_COMM, KEY_CUDA_DEV, KEY_CALLS, KEY_GROUP, KEY_COLUMNS };
/* TS_NONE ... TS_EPOCH and NO_GLOBAL_RANK of nccl_coll_scan.py. */
enum { TS_NONE, TS_LOCAL, TS_ZONED, TS_EPOCH };
#define NO_GLOBAL_RANK INT32_MIN
/* Years the scan converts itself; polars' nanosecond datetimes span 1678-2262. */
#define MIN_YEAR 1900
#define MAX_YEAR 2200

#define STRING_COLUMNS 5
#define LITERAL(text) (const uint8_t *)(text), (int64_t)(sizeof(text) - 1)

/* Distinct tuples of numbers: rows of `columns` int64 (the tuple, then a count of calls), and
 * their open-addressing table of -1 or row indices. */
typedef struct {
    int64_t *rows;
    int64_t columns;
    int32_t *table;
    int64_t table_mask;
    int64_t used;
    int64_t max_rows;
} Index;

/* What one scan writes: the fields arrays (one column of `capacity` per field), the distinct
 * strings as rows of (offset, length, hash, first word, second word), their open-addressing
 * table of -1 or string ids, the distinct (host, pid, comm, cuda_dev) of the calls (keys) and
 * (host, pid, comm) (groups), whose calls are numbered. */
typedef struct {
    const uint8_t *data;
    int64_t size;
    int64_t **wide;
    int32_t **narrow;
    int64_t capacity;
    int64_t *strings;
    int64_t max_strings;
    int64_t *table;
    int64_t table_mask;
    int64_t used;
    Index keys;
    Index groups;
    int timed;   /* whether the timestamp fields are written (see set_time) */
    int ranked;  /* whether GLOBAL_RANK is (see message) */
} Scan;

#define WIDE(scan, field, row) ((scan)->wide[field][row])
#define NARROW(scan, field, row) ((scan)->narrow[field][row])

static int is_digit(uint8_t byte) { return byte >= '0' && byte <= '9'; }

/* [^\s:\[\]<>()] on printable ASCII: the characters of a host name. */
static int is_host_char(uint8_t byte)
{
    return byte != ' ' && byte != ':' && byte != '[' && byte != ']' && byte != '<'
           && byte != '>' && byte != '(' && byte != ')';
}

/* The position after the literal when the text at pos starts with it, else -1. */
HOT_INLINE int64_t expect(const uint8_t *data, int64_t pos, int64_t stop,
                          const uint8_t *literal, int64_t length)
{
    if (pos < 0 || pos + length > stop || memcmp(data + pos, literal, (size_t)length) != 0)
        return -1;
    return pos + length;
}

/* The value of a decimal digit, or with base 16 of a hex digit of either case; -1 for others. */
HOT_INLINE int64_t digit_value(uint8_t byte, int64_t base)
{
    if (is_digit(byte))
        return byte - '0';
    if (base == 16 && byte >= 'a' && byte <= 'f')
        return byte - 'a' + 10;
    if (base == 16 && byte >= 'A' && byte <= 'F')
        return byte - 'A' + 10;
    return -1;
}

/* The position after 1 to max_digits digits of base at pos (their value in *value, 0 on
 * failure); -1 when there are none or more. */
HOT_INLINE int64_t number_at(const uint8_t *data, int64_t pos, int64_t stop, int64_t base,
                             int64_t max_digits, int64_t *value)
{
    int64_t start = pos, digit, number = 0;
    *value = 0;
    if (pos < 0)
        return -1;
    for (; pos < stop && (digit = digit_value(data[pos], base)) >= 0; pos++) {
        if (pos - start == max_digits)
            return -1;
        number = number * base + digit;
    }
    if (pos == start)
        return -1;
    *value = number;
    return pos;
}

HOT_INLINE int64_t unsigned_at(const uint8_t *data, int64_t pos, int64_t stop,
                               int64_t max_digits, int64_t *value)
{
    return number_at(data, pos, stop, 10, max_digits, value);
}

HOT_INLINE int64_t signed_at(const uint8_t *data, int64_t pos, int64_t stop,
                             int64_t max_digits, int64_t *value)
{
    if (pos >= 0 && pos < stop && data[pos] == '-') {
        pos = unsigned_at(data, pos + 1, stop, max_digits, value);
        *value = -*value;
        return pos;
    }
    return unsigned_at(data, pos, stop, max_digits, value);
}

/* The end of the non-empty run of printable non-space characters at pos, else -1 (also for
 * an N: it might start a second NCCL). */
HOT_INLINE int64_t token(const uint8_t *data, int64_t pos, int64_t stop)
{
    int64_t start = pos;
    if (pos < 0)
        return -1;
    while (pos < stop && data[pos] != ' ') {
        if (data[pos] < 33 || data[pos] > 126 || data[pos] == 'N')
            return -1;
        pos++;
    }
    return pos > start ? pos : -1;
}

/* The bytes data[pos:stop] (at most 8, none when pos >= stop) as one word, the bytes after
 * them zero; read as one load where the block has 8 bytes from pos. */
static inline uint64_t word_at(const Scan *scan, int64_t pos, int64_t stop)
{
    uint64_t word = 0;
    int64_t length = stop - pos < 8 ? stop - pos : 8;
    if (length <= 0)
        return 0;
    if (pos + 8 > scan->size) {
        memcpy(&word, scan->data + pos, (size_t)length);
        return word;
    }
    memcpy(&word, scan->data + pos, 8);
    if (length < 8) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        word &= ~UINT64_C(0) << (8 * (8 - length));
#else
        word &= ~UINT64_C(0) >> (8 * (8 - length));
#endif
    }
    return word;
}

#define HASH_MULTIPLIER UINT64_C(0x9E3779B97F4A7C15)

/* The id of data[start:stop] among the block's distinct strings (adding it when new), or -1
 * when the table is full. Hashed a word (8 bytes) at a time, and a string's first two words
 * are kept in its row, so the hosts, op names and comm pointers (7-18 bytes) are compared
 * without reading their first copy again: a byte-at-a-time hash and a memcmp call per string
 * were two fifths of the scan. */
static int64_t intern(Scan *scan, int64_t start, int64_t stop)
{
    int64_t slot, found, length = stop - start;
    uint64_t first = word_at(scan, start, stop), second = word_at(scan, start + 8, stop);
    uint64_t hashed = (((uint64_t)length ^ first) * HASH_MULTIPLIER ^ second) * HASH_MULTIPLIER;
    for (int64_t pos = start + 16; pos < stop; pos += 8)
        hashed = (hashed ^ word_at(scan, pos, stop)) * HASH_MULTIPLIER;
    hashed = (hashed ^ (hashed >> 32)) & UINT64_C(0x7FFFFFFFFFFFFFFF);
    slot = (int64_t)hashed & scan->table_mask;
    for (;;) {
        found = scan->table[slot];
        if (found < 0) {
            if (scan->used == scan->max_strings)
                return -1;
            found = scan->used++;
            int64_t *row = scan->strings + STRING_COLUMNS * found;
            row[0] = start;
            row[1] = length;
            row[2] = (int64_t)hashed;
            row[3] = (int64_t)first;
            row[4] = (int64_t)second;
            scan->table[slot] = found;
            return found;
        }
        const int64_t *row = scan->strings + STRING_COLUMNS * found;
        if (row[2] == (int64_t)hashed && row[1] == length && row[3] == (int64_t)first
            && row[4] == (int64_t)second
            && (length <= 16 || memcmp(scan->data + row[0] + 16, scan->data + start + 16,
                                       (size_t)(length - 16)) == 0))
            return found;
        slot = (slot + 1) & scan->table_mask;
    }
}

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm), for years
 * from MIN_YEAR: every quotient is of a non-negative number. */
static int64_t days_from_civil(int64_t year, int64_t month, int64_t day)
{
    year -= month <= 2;
    int64_t era = year / 400, year_of_era = year - era * 400;
    int64_t day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
    int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    return era * 146097 + day_of_era - 719468;
}

static int64_t days_in_month(int64_t year, int64_t month)
{
    if (month == 2)
        return ((year % 4 == 0 && year % 100 != 0) || year % 400 == 0) ? 29 : 28;
    return (month == 4 || month == 6 || month == 9 || month == 11) ? 30 : 31;
}

/* The position after the 1-9 digits after a decimal mark at pos, their nanoseconds in *value;
 * the regex takes at most nine, so a tenth digit is left where it is. */
static int64_t fraction_ns(const uint8_t *data, int64_t pos, int64_t stop, int64_t *value)
{
    int64_t digits = 0, number = 0;
    while (pos < stop && digits < 9 && is_digit(data[pos])) {
        number = number * 10 + (data[pos] - '0');
        digits++;
        pos++;
    }
    for (; digits < 9; digits++)
        number *= 10;
    *value = number;
    return pos;
}

/* The number of the two digits at pos (whatever follows them), else -1. */
HOT_INLINE int64_t two_digits(const uint8_t *data, int64_t pos, int64_t stop)
{
    if (pos >= 0 && pos + 2 <= stop && is_digit(data[pos]) && is_digit(data[pos + 1]))
        return (data[pos] - '0') * 10 + (data[pos + 1] - '0');
    return -1;
}

/* Whether the character at pos is byte or other. */
static int is_at(const uint8_t *data, int64_t pos, int64_t stop, uint8_t byte, uint8_t other)
{
    return pos >= 0 && pos < stop && (data[pos] == byte || data[pos] == other);
}

static void set_untimed(Scan *scan, int64_t row)
{
    NARROW(scan, TS_KIND, row) = TS_NONE;
    WIDE(scan, TS_SECONDS, row) = 0;
    NARROW(scan, TS_OFFSET_S, row) = 0;
    NARROW(scan, TS_FRAC_NS, row) = 0;
}

/* The timestamp fields of row. They are written from the block's first timed call on (the rows
 * before it filled with TS_NONE then), so a block without timestamps never touches their pages
 * (a fifth of the fields' bytes). */
static void set_time(Scan *scan, int64_t row, int64_t kind, int64_t seconds, int64_t offset,
                     int64_t frac)
{
    if (!scan->timed) {
        if (kind == TS_NONE)
            return;
        for (int64_t earlier = 0; earlier < row; earlier++)
            set_untimed(scan, earlier);
        scan->timed = 1;
    }
    NARROW(scan, TS_KIND, row) = (int32_t)kind;
    WIDE(scan, TS_SECONDS, row) = seconds;
    NARROW(scan, TS_OFFSET_S, row) = (int32_t)offset;
    NARROW(scan, TS_FRAC_NS, row) = (int32_t)frac;
}

/* YYYY-MM-DD[T ]HH:MM:SS([.,]frac)?(Z|[+-]HH:?MM)? at pos, where a run of exactly four digits
 * starts. 0 for anything else, and for dates polars would not parse. */
static int iso_time(Scan *scan, int64_t pos, int64_t stop, int64_t row)
{
    const uint8_t *data = scan->data;
    int64_t year, frac = 0, kind = TS_LOCAL, offset = 0;
    unsigned_at(data, pos, pos + 4, 4, &year);
    int64_t month = is_at(data, pos + 4, stop, '-', '-') ? two_digits(data, pos + 5, stop) : -1;
    int64_t day = is_at(data, pos + 7, stop, '-', '-') ? two_digits(data, pos + 8, stop) : -1;
    int64_t hour = is_at(data, pos + 10, stop, 'T', ' ') ? two_digits(data, pos + 11, stop) : -1;
    int64_t minute = is_at(data, pos + 13, stop, ':', ':') ? two_digits(data, pos + 14, stop)
                                                           : -1;
    int64_t second = is_at(data, pos + 16, stop, ':', ':') ? two_digits(data, pos + 17, stop)
                                                           : -1;
    if (month < 0 || day < 0 || hour < 0 || minute < 0 || second < 0
        || !(year >= MIN_YEAR && year <= MAX_YEAR && month >= 1 && month <= 12 && day >= 1
             && day <= days_in_month(year, month) && hour < 24 && minute < 60 && second < 60))
        return 0;
    pos += 19;
    if (is_at(data, pos, stop, '.', ',') && pos + 1 < stop && is_digit(data[pos + 1]))
        pos = fraction_ns(data, pos + 1, stop, &frac);
    if (is_at(data, pos, stop, 'Z', 'Z')) {
        kind = TS_ZONED;
    } else if (is_at(data, pos, stop, '+', '-')) {
        int64_t zone_hours = two_digits(data, pos + 1, stop);
        int colon = is_at(data, pos + 3, stop, ':', ':');
        int64_t zone_minutes = two_digits(data, colon ? pos + 4 : pos + 3, stop);
        if (zone_hours >= 0 && zone_minutes >= 0) {
            kind = TS_ZONED;
            offset = zone_hours * 3600 + zone_minutes * 60;
            offset = data[pos] == '-' ? -offset : offset;
        }
    }
    set_time(scan, row, kind,
             days_from_civil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second,
             offset, frac);
    return 1;
}

/* Ten digits of epoch seconds at pos with an optional .frac of 1-9 digits, after the prefix
 * start, a space or [ and before its end, a space or ]. */
static int epoch_time(Scan *scan, int64_t start, int64_t pos, int64_t stop, int64_t row)
{
    const uint8_t *data = scan->data;
    int64_t seconds, frac = 0;
    if (pos > start && data[pos - 1] != ' ' && data[pos - 1] != '[')
        return 0;
    pos = unsigned_at(data, pos, stop, 10, &seconds);
    if (pos + 1 < stop && data[pos] == '.' && is_digit(data[pos + 1])) {
        pos = fraction_ns(data, pos + 1, stop, &frac);
        if (pos < stop && is_digit(data[pos]))
            return 0;
    }
    if (pos < stop && data[pos] != ' ' && data[pos] != ']')
        return 0;
    set_time(scan, row, TS_EPOCH, seconds, 0, frac);
    return 1;
}

/* Read the timestamp in the prefix data[start:stop]: the first run of four or more digits
 * must be a whole timestamp (or absent); 0 otherwise. */
static int timestamp(Scan *scan, int64_t start, int64_t stop, int64_t row)
{
    const uint8_t *data = scan->data;
    int64_t pos = start;
    while (pos < stop) {
        if (!is_digit(data[pos])) {
            pos++;
            continue;
        }
        int64_t end = pos;
        while (end < stop && is_digit(data[end]))
            end++;
        if (end - pos == 4)
            return iso_time(scan, pos, stop, row);
        if (end - pos == 10)
            return epoch_time(scan, start, pos, stop, row);
        if (end - pos > 4)
            return 0;
        pos = end;
    }
    set_time(scan, row, TS_NONE, 0, 0, 0);
    return 1;
}

/* Read host:pid:tid [dev] ending at head_end backwards, as the polars parser's end-anchored
 * regex does; returns where the host starts, or -1. */
static int64_t envelope(Scan *scan, int64_t start, int64_t head_end, int64_t row,
                        int64_t *host)
{
    const uint8_t *data = scan->data;
    int64_t pos = head_end - 1, dev_end, tid_end, pid_end, host_end, host_start, dev;
    if (pos < start || data[pos] != ']')
        return -1;
    dev_end = pos--;
    while (pos >= start && is_digit(data[pos]))
        pos--;
    if (dev_end - pos - 1 < 1 || dev_end - pos - 1 > 9 || pos < start + 1 || data[pos] != '['
        || data[pos - 1] != ' ')
        return -1;
    unsigned_at(data, pos + 1, dev_end, 9, &dev);
    NARROW(scan, CUDA_DEV, row) = (int32_t)dev;
    tid_end = pos - 1;
    pos = tid_end - 1;
    while (pos >= start && is_digit(data[pos]))
        pos--;
    if (pos == tid_end - 1 || pos < start || data[pos] != ':')
        return -1;
    pid_end = pos--;
    while (pos >= start && is_digit(data[pos]))
        pos--;
    if (pid_end - pos - 1 < 1 || pid_end - pos - 1 > 18 || pos < start || data[pos] != ':')
        return -1;
    unsigned_at(data, pos + 1, pid_end, 18, &WIDE(scan, PID, row));
    host_end = pos--;
    while (pos >= start && is_host_char(data[pos]))
        pos--;
    host_start = pos + 1;
    if (host_start == host_end)
        return -1;
    *host = intern(scan, host_start, host_end);
    return *host >= 0 ? host_start : -1;
}

/* Read the COLL message from pos to the line's end; 0 unless it is exactly the common shape
 * with every number in range. */
static int message(Scan *scan, int64_t pos, int64_t stop, int64_t row, int64_t *comm)
{
    const uint8_t *data = scan->data;
    int64_t op_start = pos, op_end, comm_start, comm_end, datatype, root, nranks, op;
    int64_t global_rank = NO_GLOBAL_RANK;
    while (pos < stop && ((data[pos] >= 'A' && data[pos] <= 'Z')
                          || (data[pos] >= 'a' && data[pos] <= 'z')) && data[pos] != 'N')
        pos++;  /* letters but N (no NCCL op name has one; it might start a second NCCL) */
    if (pos == op_start)
        return 0;
    op_end = pos;
    pos = number_at(data, expect(data, pos, stop, LITERAL(": opCount ")), stop, 16, 15,
                    &WIDE(scan, OP_COUNT, row));
    pos = token(data, expect(data, pos, stop, LITERAL(" sendbuff ")), stop);
    pos = token(data, expect(data, pos, stop, LITERAL(" recvbuff ")), stop);
    pos = unsigned_at(data, expect(data, pos, stop, LITERAL(" count ")), stop, 18,
                      &WIDE(scan, COUNT, row));
    pos = unsigned_at(data, expect(data, pos, stop, LITERAL(" datatype ")), stop, 9, &datatype);
    pos = token(data, expect(data, pos, stop, LITERAL(" op ")), stop);
    pos = signed_at(data, expect(data, pos, stop, LITERAL(" root ")), stop, 9, &root);
    comm_start = expect(data, pos, stop, LITERAL(" comm "));
    comm_end = token(data, comm_start, stop);
    pos = unsigned_at(data, expect(data, comm_end, stop, LITERAL(" [nranks=")), stop, 9,
                      &nranks);
    pos = token(data, expect(data, pos, stop, LITERAL("] stream ")), stop);
    if (pos >= 0 && pos < stop) {
        pos = token(data, expect(data, pos, stop, LITERAL(" task ")), stop);
        pos = signed_at(data, expect(data, pos, stop, LITERAL(" globalrank ")), stop, 9,
                        &global_rank);
    }
    if (pos != stop)
        return 0;
    op = intern(scan, op_start, op_end);
    *comm = intern(scan, comm_start, comm_end);
    NARROW(scan, DATATYPE, row) = (int32_t)datatype;
    NARROW(scan, ROOT, row) = (int32_t)root;
    NARROW(scan, NRANKS, row) = (int32_t)nranks;
    if (!scan->ranked && global_rank != NO_GLOBAL_RANK) {
        for (int64_t earlier = 0; earlier < row; earlier++)
            NARROW(scan, GLOBAL_RANK, earlier) = NO_GLOBAL_RANK;
        scan->ranked = 1;  /* written from the block's first RCCL call on, as the times are */
    }
    if (scan->ranked)
        NARROW(scan, GLOBAL_RANK, row) = (int32_t)global_rank;
    NARROW(scan, OP_ID, row) = (int32_t)op;
    return op >= 0 && *comm >= 0;
}

/* The slot of the first `compared` values in index's table: where their row's index is, or
 * the empty slot (-1) where it goes. */
static int64_t index_slot(const Index *index, const int64_t *values, int64_t compared)
{
    uint64_t hashed = 0;
    for (int64_t k = 0; k < compared; k++)
        hashed = (hashed ^ (uint64_t)values[k]) * HASH_MULTIPLIER;
    int64_t slot = (int64_t)(hashed ^ (hashed >> 32)) & index->table_mask;
    for (;; slot = (slot + 1) & index->table_mask) {
        int32_t found = index->table[slot];
        if (found < 0)
            return slot;
        const int64_t *row = index->rows + index->columns * found;
        int64_t k = 0;
        while (k < compared && row[k] == values[k])
            k++;
        if (k == compared)
            return slot;
    }
}

/* The row of the values at slot (added, with no calls yet, when the slot is empty). */
static int64_t index_row(Index *index, int64_t slot, const int64_t *values, int64_t compared)
{
    if (index->table[slot] < 0) {
        int64_t *row = index->rows + index->columns * index->used;
        memcpy(row, values, (size_t)compared * sizeof(int64_t));
        row[compared] = 0;
        index->table[slot] = (int32_t)index->used++;
    }
    return index->table[slot];
}

/* Give the call at row its key and its number among its group's calls in this block (the
 * reader adds the calls of earlier blocks): 0 when a new key or group finds its index full. A
 * key's row keeps its group's index, so only a new key looks its group up. */
static int number_call(Scan *scan, int64_t row, int64_t host, int64_t comm)
{
    int64_t values[4] = {host, WIDE(scan, PID, row), comm, NARROW(scan, CUDA_DEV, row)};
    int64_t key_slot = index_slot(&scan->keys, values, 4), key, group;
    if (scan->keys.table[key_slot] >= 0) {
        key = scan->keys.table[key_slot];
        group = scan->keys.rows[KEY_COLUMNS * key + KEY_GROUP];
    } else {
        int64_t group_slot = index_slot(&scan->groups, values, 3);
        if (scan->keys.used == scan->keys.max_rows
            || (scan->groups.table[group_slot] < 0
                && scan->groups.used == scan->groups.max_rows))
            return 0;
        group = index_row(&scan->groups, group_slot, values, 3);
        key = index_row(&scan->keys, key_slot, values, 4);
        scan->keys.rows[KEY_COLUMNS * key + KEY_GROUP] = group;
    }
    scan->keys.rows[KEY_COLUMNS * key + KEY_CALLS]++;
    NARROW(scan, KEY, row) = (int32_t)key;
    NARROW(scan, CALL_INDEX, row) = (int32_t)scan->groups.rows[4 * group + 3]++;
    return 1;
}

/* Read the line data[start:stop]: printable, its first NCCL starts " NCCL INFO " (and the
 * message holds no other). */
static int line(Scan *scan, int64_t start, int64_t stop, int64_t row)
{
    const uint8_t *data = scan->data;
    int64_t nccl_at = start, host_start, host, comm;
    while (nccl_at + 3 < stop) {
        uint8_t byte = data[nccl_at];
        if (byte < ' ' || byte > 126)
            return 0;
        if (byte == 'N' && data[nccl_at + 1] == 'C' && data[nccl_at + 2] == 'C'
            && data[nccl_at + 3] == 'L')
            break;
        nccl_at++;
    }
    if (nccl_at <= start || data[nccl_at - 1] != ' '
        || expect(data, nccl_at, stop, LITERAL("NCCL INFO ")) < 0)
        return 0;
    host_start = envelope(scan, start, nccl_at - 1, row, &host);
    if (host_start < 0 || !timestamp(scan, start, host_start, row)
        || !message(scan, nccl_at + 10, stop, row, &comm))
        return 0;
    return number_call(scan, row, host, comm);
}

/* Scan data[0:size], whole lines. The caller allocates: wide (4 arrays of capacity) and narrow
 * (12 arrays of capacity, where capacity is size / MIN_LINE_BYTES + 1), strings (max_strings x
 * 5), table (2 * max_strings, a power of two, all -1), keys (max_keys x KEY_COLUMNS) and groups
 * (max_keys x 4), key_tables (2 x 2 * max_keys, a power of two, all -1: the keys' table, then
 * the groups'), runs ((capacity + 1) x 2: rejected runs as (first line index, line count)),
 * rejected (size bytes). counts receives (lines, accepted, string count, run count, rejected
 * size, key count, group count, whether the timestamp fields and GLOBAL_RANK were written). */
void nccl_coll_scan(const uint8_t *data, int64_t size, int64_t **wide, int32_t **narrow,
                    int64_t capacity, int64_t *strings, int64_t max_strings, int64_t *table,
                    int64_t *keys, int64_t *groups, int64_t max_keys, int32_t *key_tables,
                    int64_t *runs, uint8_t *rejected, int64_t *counts)
{
    Scan scan = {data, size, wide, narrow, capacity, strings, max_strings, table,
                 2 * max_strings - 1, 0,
                 {keys, KEY_COLUMNS, key_tables, 2 * max_keys - 1, 0, max_keys},
                 {groups, 4, key_tables + 2 * max_keys, 2 * max_keys - 1, 0, max_keys}, 0, 0};
    int64_t lines = 0, accepted = 0, run_count = 0, rejected_size = 0, start = 0;
    while (start < size) {
        const uint8_t *newline = memchr(data + start, '\n', (size_t)(size - start));
        int64_t pos = newline ? newline - data : size;
        int terminated = pos < size;
        int64_t stop = terminated && pos > start && data[pos - 1] == '\r' ? pos - 1 : pos;
        if (terminated && accepted < capacity && lines < INT32_MAX
            && line(&scan, start, stop, accepted)) {
            NARROW(&scan, LINE_INDEX, accepted) = (int32_t)lines;
            accepted++;
        } else {
            if (run_count > 0 && runs[2 * run_count - 2] + runs[2 * run_count - 1] == lines) {
                runs[2 * run_count - 1]++;
            } else {
                runs[2 * run_count] = lines;
                runs[2 * run_count + 1] = 1;
                run_count++;
            }
            int64_t end = terminated ? pos + 1 : pos;
            memcpy(rejected + rejected_size, data + start, (size_t)(end - start));
            rejected_size += end - start;
        }
        lines++;
        start = pos + 1;
    }
    counts[0] = lines;
    counts[1] = accepted;
    counts[2] = scan.used;
    counts[3] = run_count;
    counts[4] = rejected_size;
    counts[5] = scan.keys.used;
    counts[6] = scan.groups.used;
    counts[7] = scan.timed;
    counts[8] = scan.ranked;
}
