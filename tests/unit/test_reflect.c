/* SPDX-License-Identifier: Apache-2.0
 *
 * test_reflect.c - server reflection's answers (src/reflect.h) on the
 * tables embedded at build time: the services listed; a file found by
 * name and by every kind of symbol, its bytes a FileDescriptorProto of
 * that name; unknown names and extension queries answered inside the
 * response; malformed and oversized requests refused; the symbol table
 * sorted as bsearch needs.
 */
#include "dd.h"
#include "reflect.h"
#include "testlib.h"

#include "reflection.pb-c.h"

#include <stdlib.h>
#include <string.h>

typedef Grpc__Reflection__V1__ServerReflectionRequest Req;
typedef Grpc__Reflection__V1__ServerReflectionResponse Resp;

/* Pack RQ, answer it, unpack the answer (caller frees). */
static Resp *ask(const Req *rq)
{
    size_t n = grpc__reflection__v1__server_reflection_request__get_packed_size(rq);
    uint8_t *buf = malloc(n + 1);
    grpc__reflection__v1__server_reflection_request__pack(rq, buf);
    uint8_t *out = NULL;
    size_t outlen = 0;
    int rc = dd_reflect_answer(buf, n, &out, &outlen);
    free(buf);
    CHECK_EQ_INT(rc, DD_OK);
    if (rc != DD_OK) return NULL;
    Resp *r = grpc__reflection__v1__server_reflection_response__unpack(NULL, outlen, out);
    free(out);
    CHECK(r != NULL);
    return r;
}

/* The name (field 1) of a serialized FileDescriptorProto. */
static void fdp_name(const ProtobufCBinaryData *b, char *out, size_t cap)
{
    out[0] = '\0';
    if (b->len < 2 || b->data[0] != 0x0a || b->data[1] >= 0x80 || (size_t)b->data[1] + 2 > b->len ||
        b->data[1] >= cap)
        return;
    memcpy(out, b->data + 2, b->data[1]);
    out[b->data[1]] = '\0';
}

static void expect_file(const char *symbol, const char *filename, int by_name)
{
    Req rq = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    rq.host = "h";
    if (by_name) {
        rq.message_request_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME;
        rq.file_by_filename = (char *)symbol;
    } else {
        rq.message_request_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
        rq.file_containing_symbol = (char *)symbol;
    }
    Resp *r = ask(&rq);
    if (!r) return;
    CHECK_MSG(
        r->message_response_case ==
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE &&
            r->file_descriptor_response->n_file_descriptor_proto == 1,
        "%s: no file", symbol);
    if (r->message_response_case ==
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE) {
        char name[64];
        fdp_name(&r->file_descriptor_response->file_descriptor_proto[0], name, sizeof name);
        CHECK_STR(name, filename);
    }
    CHECK(r->original_request &&
          r->original_request->message_request_case == rq.message_request_case);
    CHECK_STR(r->valid_host, "h");
    grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
}

static void expect_error(Req *rq, int code, const char *contains)
{
    Resp *r = ask(rq);
    if (!r) return;
    CHECK(r->message_response_case ==
          GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE);
    if (r->message_response_case ==
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE) {
        CHECK_EQ_INT(r->error_response->error_code, code);
        CHECK_MSG(strstr(r->error_response->error_message, contains) != NULL, "%s",
                  r->error_response->error_message);
    }
    grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
}

static void test_services(void)
{
    Req rq = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    rq.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES;
    rq.list_services = "*";
    Resp *r = ask(&rq);
    if (!r) return;
    CHECK(
        r->message_response_case ==
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE);
    const char *want[] = {"dedup.v1.Dedup", "dedup.v1.Cluster", "grpc.health.v1.Health"};
    CHECK_EQ_INT(r->list_services_response->n_service, 3);
    for (size_t i = 0; i < 3 && i < r->list_services_response->n_service; i++)
        CHECK_STR(r->list_services_response->service[i]->name, want[i]);
    grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
}

static void test_files(void)
{
    expect_file("dedup.proto", "dedup.proto", 1);
    expect_file("health.proto", "health.proto", 1);
    expect_file("dedup.v1.Dedup", "dedup.proto", 0);
    expect_file(".dedup.v1.Dedup", "dedup.proto", 0);
    expect_file("dedup.v1.Dedup.Filter", "dedup.proto", 0);
    expect_file("dedup.v1.Cluster.SnapshotRead", "dedup.proto", 0);
    expect_file("dedup.v1.FilterRequest", "dedup.proto", 0);
    expect_file("dedup.v1.FilterRequest.candidate_ids", "dedup.proto", 0);
    expect_file("grpc.health.v1.Health.Watch", "health.proto", 0);
    expect_file("grpc.health.v1.HealthCheckResponse.ServingStatus", "health.proto", 0);
    expect_file("grpc.health.v1.HealthCheckResponse.SERVICE_UNKNOWN", "health.proto", 0);
    CHECK(dd_reflect_find_symbol("dedup.v1") == NULL);
    CHECK(dd_reflect_find_symbol("dedup.v1.Dedu") == NULL);
    CHECK(dd_reflect_find_file("dedup") == NULL);
    for (size_t i = 1; i < dd_reflect_nsymbols; i++)
        CHECK_MSG(strcmp(dd_reflect_symbols[i - 1].name, dd_reflect_symbols[i].name) < 0,
                  "symbols out of order at %s", dd_reflect_symbols[i].name);
}

static void test_errors(void)
{
    Req rq = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    rq.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL;
    rq.file_containing_symbol = "no.such\"Symbol\n";
    expect_error(&rq, 5, "\"no.such\\\"Symbol\\x0a\" not found");
    rq.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME;
    rq.file_by_filename = "google/protobuf/descriptor.proto";
    expect_error(&rq, 5, "not found");
    Grpc__Reflection__V1__ExtensionRequest ext = GRPC__REFLECTION__V1__EXTENSION_REQUEST__INIT;
    ext.containing_type = "dedup.v1.FilterRequest";
    ext.extension_number = 100;
    rq.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION;
    rq.file_containing_extension = &ext;
    expect_error(&rq, 5, "no extension");
    rq.message_request_case =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE;
    rq.all_extension_numbers_of_type = "no.Such";
    expect_error(&rq, 5, "not found");
    Req empty = GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__INIT;
    expect_error(&empty, 3, "no request");

    rq.all_extension_numbers_of_type = "dedup.v1.FilterRequest";
    Resp *r = ask(&rq);
    if (r) {
        CHECK(
            r->message_response_case ==
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE);
        if (r->all_extension_numbers_response) {
            CHECK_STR(r->all_extension_numbers_response->base_type_name, "dedup.v1.FilterRequest");
            CHECK_EQ_INT(r->all_extension_numbers_response->n_extension_number, 0);
        }
        grpc__reflection__v1__server_reflection_response__free_unpacked(r, NULL);
    }

    /* not a ServerReflectionRequest; longer than the bound */
    uint8_t *out = (uint8_t *)1;
    size_t outlen = 7;
    const uint8_t junk[] = {0xff, 0xff, 0xff};
    CHECK_EQ_INT(dd_reflect_answer(junk, sizeof junk, &out, &outlen), DD_ERR_INVALID);
    CHECK(out == NULL && outlen == 0);
    uint8_t *big = calloc(DD_REFLECT_MAX_REQUEST + 1, 1);
    big[0] = 0x0a; /* host, then zeros: a valid message, but too long */
    big[1] = 0x7f;
    CHECK_EQ_INT(dd_reflect_answer(big, DD_REFLECT_MAX_REQUEST + 1, &out, &outlen), DD_ERR_INVALID);
    free(big);
}

int main(void)
{
    test_services();
    test_files();
    test_errors();
    TEST_MAIN_END();
}
