/* The status page's charts of a processor's last hour (page_int.h): jobs finished, jobs
 * failed and how long they had waited in the queue, one bar a minute, as inline SVG (no
 * script, no library): a y axis with a scale rounded to 1, 2, 2.5 or 5 times a power of
 * ten and its gridlines, an x axis in minutes before now, each bar's value on hover. */
#include <stdio.h>

#include "http/page_int.h"

/* The drawing: W x H, the plot between X0..X1 and Y0 (top) .. Y1 (the zero line). */
#define W 330
#define H 132
#define X0 46
#define X1 322
#define Y0 22
#define Y1 108
#define MINUTES 60

typedef enum { K_COUNT, K_MS } kind_t;

/* The least "nice" number >= x: for counts 1, 2, 2.5 or 5 times a power of ten (no 2.5
 * below 10, so that the half-way tick is a whole number or none); for times a step of the
 * clock (1, 2, 5, 10, 15, 20, 30 s or min, 1, 2, 3, 6, 12, 24 h, whole days). */
static double nice(double x, kind_t k) {
  static const double steps[] = {1, 2, 2.5, 5, 10};
  static const double clock[] = {1,   2,    5,    10,   20,   50,    100,   200,   500,  1e3,
                                 2e3, 5e3,  1e4,  15e3, 2e4,  3e4,   6e4,   12e4,  3e5,  6e5,
                                 9e5, 12e5, 18e5, 36e5, 72e5, 108e5, 216e5, 432e5, 864e5};
  double p = 1;
  if (k == K_MS) {
    for (size_t i = 0; i < sizeof(clock) / sizeof(clock[0]); i++)
      if (clock[i] >= x)
        return clock[i];
    return 864e5 * nice(x / 864e5, K_COUNT);
  }
  if (x <= 1)
    return 1;
  while (p * 10 <= x)
    p *= 10;
  for (int i = 0; i < 5; i++)
    if (steps[i] * p >= x && (steps[i] != 2.5 || p >= 10))
      return steps[i] * p;
  return 10 * p;
}

static int whole(double v) {
  return v == (double)(long long)v;
}

/* A value as an axis or a tooltip shows it. */
static void label(FILE *f, double v, kind_t k) {
  if (v == 0)
    fputs("0", f);
  else if (k == K_MS)
    mqproc__page_duration(f, v);
  else if (whole(v))
    fprintf(f, "%.0f", v);
  else
    fprintf(f, "%.1f", v);
}

/* The axes: gridlines and labels at 0, the half and the top of the scale (top), and the
 * minutes before now along the bottom. */
static void axes(FILE *f, double top, kind_t k) {
  for (int i = 0; i <= 2; i++) {
    double v = top * i / 2, y = Y1 - (double)(Y1 - Y0) * i / 2;
    if (i == 1 && k == K_COUNT && !whole(v))
      continue; /* no "0.5 jobs" */
    fprintf(f, "<line class=\"%s\" x1=\"%d\" x2=\"%d\" y1=\"%.1f\" y2=\"%.1f\"/>",
            i == 0 ? "axis" : "grid", X0, X1, y, y);
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" class=\"y\">", X0 - 4, y + 3.5);
    label(f, v, k);
    fputs("</text>", f);
  }
  fprintf(f, "<line class=\"axis\" x1=\"%d\" x2=\"%d\" y1=\"%d\" y2=\"%d\"/>", X0, X0, Y0, Y1);
  for (int m = 60; m >= 0; m -= 15) {
    double x = X0 + (double)(X1 - X0) * (MINUTES - m) / MINUTES;
    fprintf(f, "<line class=\"axis\" x1=\"%.1f\" x2=\"%.1f\" y1=\"%d\" y2=\"%d\"/>", x, x, Y1,
            Y1 + 3);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"%s\" class=\"x\">", x, Y1 + 14,
            m == 60  ? "start"
            : m == 0 ? "end"
                     : "middle");
    if (m == 0)
      fputs("now", f);
    else
      fprintf(f, "-%d min", m);
    fputs("</text>", f);
  }
}

/* One chart: the title, what the values are (a bar's tooltip says "N min ago: V UNIT"). */
static void chart(FILE *f, const char *title, const char *unit, const char *cls, const json_t *vals,
                  kind_t k) {
  double max = 0, sum = 0, top, slot = (double)(X1 - X0) / MINUTES;
  size_t i, n = json_array_size(vals);
  int some = 0;
  json_t *v;
  json_array_foreach(vals, i, v) {
    double x = json_number_value(v);
    if (!json_is_number(v))
      continue;
    some = 1;
    max = x > max ? x : max;
    sum += x;
  }
  top = nice(max, k);
  fprintf(f,
          "<svg class=\"c\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" role=\"img\" "
          "aria-label=\"%s over the last hour, one bar a minute\">",
          W, H, W, H, title);
  fputs("<title>", f);
  fprintf(f, "%s over the last hour, one bar a minute: ", title);
  if (k == K_COUNT)
    fprintf(f, "%.0f in all, at most %.0f a minute", sum, max);
  else if (some) {
    fputs("at most ", f);
    mqproc__page_duration(f, max);
  } else {
    fputs("no jobs", f);
  }
  fprintf(f, "</title><text x=\"%d\" y=\"12\" class=\"ttl\">%s</text>", X0 - 40, title);
  axes(f, top, k);
  for (i = 0; i < n && i < MINUTES; i++) {
    json_t *x = json_array_get(vals, i);
    double val = json_number_value(x), h = (Y1 - Y0) * val / top;
    if (!json_is_number(x) || val <= 0)
      continue;
    if (h < 1)
      h = 1; /* a small value still shows */
    fprintf(f, "<rect class=\"%s\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\"><title>",
            cls, X0 + slot * (double)i + .5, Y1 - h, slot - 1, h);
    if (MINUTES - 1 - i == 0)
      fputs("this minute: ", f);
    else
      fprintf(f, "%zu min ago: ", MINUTES - 1 - i);
    label(f, val, k);
    fprintf(f, "%s</title></rect>", unit);
  }
  if (!some || max == 0)
    fprintf(f, "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" class=\"none\">none</text>",
            (X0 + X1) / 2, (Y0 + Y1) / 2 + 4);
  fputs("</svg>", f);
}

void mqproc__page_hour(FILE *f, const json_t *hour) {
  if (hour == NULL || json_is_null(hour)) {
    fputs("<p class=\"err\">the last hour cannot be read now</p>", f);
    return;
  }
  chart(f, "jobs finished / min", " jobs", "fin", json_object_get(hour, "finished"), K_COUNT);
  chart(f, "failed / min", " failed", "fail", json_object_get(hour, "failed"), K_COUNT);
  chart(f, "queue wait (mean)", "", "wait", json_object_get(hour, "wait_ms"), K_MS);
}
