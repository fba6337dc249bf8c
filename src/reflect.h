/* SPDX-License-Identifier: Apache-2.0
 *
 * reflect.h - gRPC server reflection's answers (proto/reflection.proto),
 * what grpcurl and grpc_cli ask before they can call a method without the
 * .proto files: the services (dedup.v1.Dedup, dedup.v1.Cluster,
 * grpc.health.v1.Health), and the serialized FileDescriptorProto of
 * proto/dedup.proto or proto/health.proto by file name or by any symbol
 * either declares (message, field, enum, enum value, service, method).
 *
 * The descriptors are embedded at build time (proto/meson.build: protoc-c
 * --descriptor_set_out, then proto/embed_descriptors.py writes the
 * tables below), so they always match the protos the server was built
 * from. Neither file imports another, so an answer is always one file.
 *
 * Pure code on const tables: no I/O, no state; safe from any thread. How
 * the stream is carried (grpc calls, bounds) is stream.h's.
 */
#ifndef DD_REFLECT_H
#define DD_REFLECT_H

#include <stddef.h>
#include <stdint.h>

/* ---- the embedded tables (generated: reflect_tables.c) ----------------- */

struct dd_reflect_file {
    const char *name;           /* "dedup.proto", "health.proto" */
    const unsigned char *bytes; /* the serialized FileDescriptorProto */
    size_t len;
};
struct dd_reflect_symbol {
    const char *name; /* fully qualified, without a leading '.' */
    size_t file;      /* index into dd_reflect_files */
};
extern const struct dd_reflect_file dd_reflect_files[];
extern const size_t dd_reflect_nfiles;
extern const struct dd_reflect_symbol dd_reflect_symbols[]; /* sorted by strcmp */
extern const size_t dd_reflect_nsymbols;
extern const char *const dd_reflect_services[];
extern const size_t dd_reflect_nservices;

/* Largest request answered: a symbol or file name is far shorter. */
#define DD_REFLECT_MAX_REQUEST 4096

/* The file declaring SYMBOL (a leading '.' is ignored), or NULL. */
const struct dd_reflect_file *dd_reflect_find_symbol(const char *symbol);
/* The file named NAME, or NULL. */
const struct dd_reflect_file *dd_reflect_find_file(const char *name);

/* The answer to one ServerReflectionRequest in REQ (LEN bytes): a
 * serialized ServerReflectionResponse in a malloc'd buffer (*OUT, *OUTLEN;
 * the caller frees it), carrying the request back as original_request
 * and its host as valid_host. A name not found, an extension query (no
 * extensions are declared: file_containing_extension is NOT_FOUND,
 * all_extension_numbers_of_type answers an empty list for a known
 * message) or an empty request is an error_response inside a normal
 * answer, as the protocol wants. Returns 0; DD_ERR_INVALID when REQ is
 * longer than DD_REFLECT_MAX_REQUEST or not a ServerReflectionRequest
 * (the caller ends the stream INVALID_ARGUMENT); DD_ERR_NOMEM. */
int dd_reflect_answer(const uint8_t *req, size_t len, uint8_t **out, size_t *outlen);

#endif
