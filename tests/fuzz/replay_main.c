/* main() for a fuzz target without libFuzzer (gcc, CI): runs each input once. Arguments
 * are files or directories of inputs (options starting with '-' are libFuzzer's and
 * skipped); exits 1 when there was no input at all, so an empty corpus cannot pass. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

static long run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  long size;
  uint8_t *buf;
  if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (size = ftell(f)) < 0 ||
      fseek(f, 0, SEEK_SET) != 0) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(2);
  }
  buf = malloc(size > 0 ? (size_t)size : 1); /* exact size: ASan sees a read past its end */
  if (buf == NULL || fread(buf, 1, (size_t)size, f) != (size_t)size) {
    fprintf(stderr, "cannot read %s\n", path);
    exit(2);
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, (size_t)size);
  free(buf);
  return 1;
}

static long run_path(const char *path) {
  struct stat st;
  long n = 0;
  DIR *d;
  struct dirent *e;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "no such input: %s\n", path);
    exit(2);
  }
  if (!S_ISDIR(st.st_mode))
    return run_file(path);
  if ((d = opendir(path)) == NULL)
    exit(2);
  while ((e = readdir(d)) != NULL) {
    char sub[4096];
    if (e->d_name[0] == '.')
      continue;
    snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
    n += run_path(sub);
  }
  closedir(d);
  return n;
}

int main(int argc, char **argv) {
  long n = 0;
  for (int i = 1; i < argc; i++)
    if (argv[i][0] != '-')
      n += run_path(argv[i]);
  printf("%s: %ld input(s) replayed, every property held\n", argv[0], n);
  return n > 0 ? 0 : 1;
}
