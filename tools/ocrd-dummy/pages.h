/* ocrd-dummy page selection: OCR-D page_id expressions over the physical page IDs. */
#ifndef OCRD_DUMMY_PAGES_H
#define OCRD_DUMMY_PAGES_H

#include <stdbool.h>
#include <stddef.h>

/* Evaluates expr over ids[0..n) (the physical page IDs in order) into selected[0..n).
 *
 * expr is a comma-separated list of items, as in OCR-D/core: an ID ("PHYS_0001"), a range
 * over the trailing number of IDs with the same prefix ("PHYS_0001..PHYS_0005", width of
 * the start's number kept), a POSIX extended regex matched against the whole ID
 * ("//PHYS_000[13]"), each optionally negated with a leading "~". Pages matching any
 * positive item (all pages when there is none) minus those matching a negated item.
 * Like core, an item that matches no page, or a range whose start matches no page, is an
 * error: returns -1 with err set. */
int dummy_pages_select(const char *expr, const char *const *ids, size_t n, bool *selected,
                       char *err);

#endif
