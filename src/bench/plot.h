/*
 * plot.h - the plots of a bench or sim run, drawn by gnuplot: each tenant's
 * TTFT and TPOT CDFs, with a dashed line at each tenant's target (its SLO),
 * and output tokens per second per tenant over time, each as SVG and PNG.
 * Everything comes from the rpt (its CDFs and timeline), so a simulated run
 * without per-request records plots the same as a measured one.
 *
 * This module writes the data files (ttft_cdf.dat, tpot_cdf.dat,
 * tokens.dat) and a gnuplot script (plots.gp) into the output folder, then
 * runs `gnuplot plots.gp` there. The script stays behind, so the plots can be restyled and
 * redrawn by hand. PNG uses the pngcairo terminal when gnuplot has it, else
 * png (libgd). gnuplot missing is reported, not fatal: the data and the
 * script are still written.
 */
#ifndef TS_BENCH_PLOT_H
#define TS_BENCH_PLOT_H

#include <stddef.h>

#include "report.h"
#include "scenario.h"

/* Write the data and script into dir (which exists) and run gnuplot.
 * Returns 0; TS_ERR_IO when a file cannot be written or gnuplot fails or is
 * missing (err says which). */
int plot_write(const char *dir, const scn *s, const rpt *p, char *err, size_t errlen);

#endif
