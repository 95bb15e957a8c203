/* Headless Chromium driven from a test: Debian's /usr/bin/chromium with
 * --remote-debugging-pipe (the DevTools protocol as NUL-terminated JSON on fds 3 and 4,
 * no port, no WebSocket), one tab of a fixed size. A test loads a page, runs JavaScript
 * in it (fill a form, click, measure where an element is drawn) and reads the answer as
 * JSON; every wait has a deadline (30 s) and polls, never a bare sleep.
 *
 *   it_browser_t *b = it_browser_open(1280, 800);
 *   it_browser_goto(b, url);
 *   cr_expect(it_browser_until(b, "document.querySelector('#pause') !== null"));
 *   json_t *v = it_browser_eval(b, "document.title");   (caller decrefs)
 *   it_browser_close(b);
 *
 * The browser is a child of the test process; a test that fails before it_browser_close
 * leaves it to the closed pipe (Chromium exits when its end of the pipe closes). */
#ifndef MQPROC_TEST_BROWSER_H
#define MQPROC_TEST_BROWSER_H

#include <jansson.h>

typedef struct it_browser it_browser_t;

/* Starts the browser (its profile in the test's tmpdir) with one tab of width x height
 * CSS pixels, showing about:blank. The test fails when it cannot. */
it_browser_t *it_browser_open(int width, int height);
/* Loads url in the tab and waits until its document is complete (the test fails after
 * 30 s). */
void it_browser_goto(it_browser_t *b, const char *url);
/* The value of a JavaScript expression in the tab (promises awaited), as JSON (a new
 * reference; JSON null for undefined). The test fails when it throws. */
json_t *it_browser_eval(it_browser_t *b, const char *expr);
/* Waits (30 s) until expr is true in a complete document; 1, or 0 on timeout. */
int it_browser_until(it_browser_t *b, const char *expr);
/* Closes the browser and waits for it. NULL is ignored. */
void it_browser_close(it_browser_t *b);

#endif
