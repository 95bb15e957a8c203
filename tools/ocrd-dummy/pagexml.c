/* ocrd-dummy PAGE-XML: the skeleton for an image, the identity copy of a PAGE file. */
#include "pagexml.h"

#include <mqproc/mqproc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dummy.h"
#include "fsio.h"
#include "xmlutil.h"

/* A parameter value as core writes it into pc:Label/@value (Python's str()). */
static char *label_value(const json_t *v) {
  if (json_is_boolean(v))
    return strdup(json_is_true(v) ? "True" : "False");
  if (json_is_string(v))
    return strdup(json_string_value(v));
  return json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
}

static int add_label(xmlNode *labels, xmlNs *ns, const char *type, const char *value) {
  return dummy_xml_add(labels, ns, "Label", "value", value, "type", type, NULL) != NULL ? 0 : -1;
}

/* pc:MetadataItem for this step: the parameters and the versions, as core's add_metadata(). */
static int add_metadata_item(xmlNode *metadata, xmlNs *ns, const dummy_page_meta_t *meta) {
  xmlNode *item = dummy_xml_add(metadata, ns, "MetadataItem", "type", "processingStep", "name",
                                DUMMY_STEP, "value", DUMMY_NAME, NULL);
  xmlNode *params = NULL, *versions = NULL;
  const char *key;
  json_t *v;
  if (item != NULL)
    params = dummy_xml_add(item, ns, "Labels", "externalModel", "ocrd-tool", "externalId",
                           "parameters", NULL);
  if (params == NULL)
    return -1;
  json_object_foreach((json_t *)meta->params, key, v) {
    char *text = label_value(v);
    int rc = text != NULL ? add_label(params, ns, key, text) : -1;
    free(text);
    if (rc != 0)
      return -1;
  }
  versions = dummy_xml_add(item, ns, "Labels", "externalModel", "ocrd-tool", "externalId",
                           "version", NULL);
  if (versions == NULL || add_label(versions, ns, DUMMY_NAME, DUMMY_VERSION) != 0 ||
      add_label(versions, ns, "mqproc", MQPROC_VERSION) != 0)
    return -1;
  return 0;
}

/* pc:Metadata with Creator, Created and LastChange. */
static xmlNode *new_metadata(xmlNode *root, xmlNs *ns, const char *now) {
  xmlNode *md = dummy_xml_add(root, ns, "Metadata", NULL);
  if (md == NULL ||
      xmlNewTextChild(md, ns, BX("Creator"), BX(DUMMY_NAME " v" DUMMY_VERSION)) == NULL ||
      xmlNewTextChild(md, ns, BX("Created"), BX(now)) == NULL ||
      xmlNewTextChild(md, ns, BX("LastChange"), BX(now)) == NULL)
    return NULL;
  return md;
}

/* Fills an empty document with the skeleton; -1 when out of memory. */
static int build_skeleton(xmlDoc *doc, const char *image_filename, unsigned long width,
                          unsigned long height, const dummy_page_meta_t *meta) {
  xmlNode *root = xmlNewDocNode(doc, NULL, BX("PcGts"), NULL), *md;
  xmlNs *pc, *xsi;
  char w[24], h[24];
  if (root == NULL)
    return -1;
  xmlDocSetRootElement(doc, root);
  if ((pc = xmlNewNs(root, BX(PAGE_NS), BX("pc"))) == NULL ||
      (xsi = xmlNewNs(root, BX(XSI_NS), BX("xsi"))) == NULL)
    return -1;
  xmlSetNs(root, pc);
  if (xmlNewNsProp(root, xsi, BX("schemaLocation"), BX(PAGE_NS " " PAGE_NS "/pagecontent.xsd")) ==
          NULL ||
      xmlNewProp(root, BX("pcGtsId"), BX(meta->pcgts_id)) == NULL)
    return -1;
  if ((md = new_metadata(root, pc, meta->now)) == NULL || add_metadata_item(md, pc, meta) != 0)
    return -1;
  snprintf(w, sizeof(w), "%lu", width);
  snprintf(h, sizeof(h), "%lu", height);
  return dummy_xml_add(root, pc, "Page", "imageFilename", image_filename, "imageWidth", w,
                       "imageHeight", h, NULL) != NULL
             ? 0
             : -1;
}

int dummy_page_skeleton(const char *image_filename, unsigned long width, unsigned long height,
                        const dummy_page_meta_t *meta, char **data, size_t *len, char *err) {
  xmlDoc *doc = xmlNewDoc(BX("1.0"));
  int rc;
  if (doc == NULL || build_skeleton(doc, image_filename, width, height, meta) != 0)
    rc = dummy_err(err, "cannot build PAGE-XML %s: out of memory", meta->pcgts_id);
  else
    rc = dummy_xml_dump(doc, true, data, len, err);
  xmlFreeDoc(doc);
  return rc;
}

/* Sets pcGtsId and appends the MetadataItem (pc:Metadata created first when missing). */
static int update_page(xmlDoc *doc, const char *path, const dummy_page_meta_t *meta, char *err) {
  xmlNode *root = xmlDocGetRootElement(doc), *md;
  if (!dummy_xml_is(root, NULL, "PcGts") || root->ns == NULL)
    return dummy_err(err, "%s: not a PAGE-XML document (the root is not PcGts)", path);
  if (xmlSetProp(root, BX("pcGtsId"), BX(meta->pcgts_id)) == NULL)
    return dummy_err(err, "out of memory");
  if ((md = dummy_xml_child(root, CS(root->ns->href), "Metadata")) == NULL) {
    md = xmlNewDocNode(doc, root->ns, BX("Metadata"), NULL);
    if (md == NULL)
      return dummy_err(err, "out of memory");
    md = root->children != NULL ? xmlAddPrevSibling(root->children, md) : xmlAddChild(root, md);
  }
  if (md == NULL || add_metadata_item(md, root->ns, meta) != 0)
    return dummy_err(err, "cannot add the MetadataItem to %s", path);
  return 0;
}

int dummy_page_copy(const char *path, const dummy_page_meta_t *meta, char **data, size_t *len,
                    char *err) {
  xmlDoc *doc = dummy_xml_parse_file(path, true, err);
  int rc;
  if (doc == NULL)
    return -1;
  rc = update_page(doc, path, meta, err);
  if (rc == 0)
    rc = dummy_xml_dump(doc, true, data, len, err);
  xmlFreeDoc(doc);
  return rc;
}
