/* The BOCD recursion of tracekit/detect/bocd_kernel.py (whose docstring says why): the same
 * arithmetic as RunLengthPosterior and BocdRun in tracekit/detect/bocd.py, one loop over run
 * lengths per point. Plain C99, no Python C API: loaded with ctypes. */

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static int descending(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x < y) - (x > y);
}

/* Keep the columns whose best log probability is at least log_prune and, of those, the
 * max_runs likeliest, as numpy's stable argsort picks them: of equal ones at the cut, the
 * earlier columns go. Returns how many are kept, their indices in increasing order in keep. */
static int64_t likeliest(const double *best, int64_t size, double log_prune, int64_t max_runs,
                         int64_t *keep, double *sorted)
{
    int64_t count = 0, kept = 0, equal_dropped = 0;
    double cut = -INFINITY;
    for (int64_t j = 0; j < size; j++)
        if (best[j] >= log_prune)
            sorted[count++] = best[j];
    if (count > max_runs) {
        qsort(sorted, (size_t)count, sizeof(double), descending);
        cut = sorted[max_runs - 1];
        for (int64_t k = max_runs; k < count; k++)
            equal_dropped += sorted[k] == cut;
    }
    for (int64_t j = 0; j < size; j++) {
        if (!(best[j] >= log_prune))  /* NaN too, as numpy's best >= log_prune */
            continue;
        if (count > max_runs && (best[j] < cut || (best[j] == cut && equal_dropped-- > 0)))
            continue;
        keep[kept++] = j;
    }
    return kept;
}

/* Absorb z[:, i] for every i; write each alarm's change start into starts[:, i] (-1 for none);
 * state[0:2] = (size, t) in and out.
 *
 * log_prob, mu and beta are rows x capacity, n has capacity run lengths (columns in decreasing
 * run length, the layout of RunLengthPosterior); prior = (mu0, kappa0, alpha0, beta0); rates =
 * (log hazard, log(1 - hazard), log prune, threshold); limits = (max run lengths, short run).
 * Returns 0, or -1 when out of memory. */
int bocd_steps(const double *z, int64_t rows, int64_t points, double *log_prob, double *mu,
               double *beta, int64_t *n, int64_t capacity, int64_t *state, int64_t *last_start,
               const double *constants, const double *prior, const double *rates,
               const int64_t *limits, int64_t *starts)
{
    int64_t size = state[0], t = state[1];
    double mu0 = prior[0], kappa0 = prior[1], alpha0 = prior[2], beta0 = prior[3];
    double log_hazard = rates[0], log_growth = rates[1], log_prune = rates[2];
    double threshold = rates[3];
    int64_t max_runs = limits[0], short_run = limits[1];
    double *best = malloc(2 * (size_t)capacity * sizeof(double));
    int64_t *keep = malloc((size_t)capacity * sizeof(int64_t));
    if (best == NULL || keep == NULL) {
        free(best);
        free(keep);
        return -1;
    }
    for (int64_t i = 0; i < points; i++) {
        for (int64_t row = 0; row < rows; row++) {
            double x = z[row * points + i], top = -INFINITY, total = 0.0, log_evidence;
            double *row_prob = log_prob + row * capacity, *row_mu = mu + row * capacity;
            double *row_beta = beta + row * capacity;
            for (int64_t j = 0; j < size; j++) {
                double kappa = kappa0 + (double)n[j], alpha = alpha0 + 0.5 * (double)n[j];
                double deviation = x - row_mu[j];
                double scale2 = row_beta[j] * ((kappa + 1) / (alpha * kappa));
                double joint = row_prob[j] + (
                    constants[n[j]] - 0.5 * log(scale2)
                    - (alpha + 0.5) * log1p(deviation * deviation / (2 * alpha * scale2)));
                row_prob[j] = joint;
                if (joint > top)
                    top = joint;
                row_beta[j] += kappa * deviation * deviation / (2 * (kappa + 1));
                row_mu[j] += deviation / (kappa + 1);
            }
            for (int64_t j = 0; j < size; j++)
                total += exp(row_prob[j] - top);
            log_evidence = top + log(total);
            for (int64_t j = 0; j < size; j++)
                row_prob[j] = row_prob[j] - log_evidence + log_growth;
        }
        for (int64_t j = 0; j < size; j++)
            n[j] += 1;
        if (size == capacity) {  /* compaction: drop negligible run lengths, keep the likeliest */
            for (int64_t j = 0; j < size; j++) {
                best[j] = -INFINITY;
                for (int64_t row = 0; row < rows; row++)
                    if (log_prob[row * capacity + j] > best[j])
                        best[j] = log_prob[row * capacity + j];
            }
            int64_t kept = likeliest(best, size, log_prune, max_runs, keep, best + capacity);
            for (int64_t k = 0; k < kept; k++) {
                int64_t j = keep[k];
                n[k] = n[j];
                for (int64_t row = 0; row < rows; row++) {
                    log_prob[row * capacity + k] = log_prob[row * capacity + j];
                    mu[row * capacity + k] = mu[row * capacity + j];
                    beta[row * capacity + k] = beta[row * capacity + j];
                }
            }
            size = kept;
        }
        n[size] = 0;
        for (int64_t row = 0; row < rows; row++) {
            log_prob[row * capacity + size] = log_hazard;
            mu[row * capacity + size] = mu0;
            beta[row * capacity + size] = beta0;
        }
        size++;
        int64_t first = 0;  /* first column with a run no longer than short_run */
        while (n[first] > short_run)
            first++;
        t++;
        for (int64_t row = 0; row < rows; row++) {
            const double *row_prob = log_prob + row * capacity;
            starts[row * points + i] = -1;
            if (first >= size - 1)
                continue;
            double probability = 0.0;
            int64_t best_j = first;
            for (int64_t j = first; j < size - 1; j++) {
                probability += exp(row_prob[j]);
                if (row_prob[j] > row_prob[best_j])
                    best_j = j;
            }
            int64_t start = t - n[best_j];
            if (probability > threshold && start > last_start[row] && t > short_run) {
                last_start[row] = start;
                starts[row * points + i] = start;
            }
        }
    }
    free(best);
    free(keep);
    state[0] = size;
    state[1] = t;
    return 0;
}
