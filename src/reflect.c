/* SPDX-License-Identifier: Apache-2.0
 *
 * reflect.c - see reflect.h.
 */
#include "reflect.h"

#include "dd.h"

#include "reflection.pb-c.h"

#include <grpc/status.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_symbol(const void *key, const void *elem)
{
    return strcmp(key, ((const struct dd_reflect_symbol *)elem)->name);
}

const struct dd_reflect_file *dd_reflect_find_symbol(const char *symbol)
{
    if (symbol[0] == '.') symbol++;
    const struct dd_reflect_symbol *s = bsearch(symbol, dd_reflect_symbols, dd_reflect_nsymbols,
                                                sizeof dd_reflect_symbols[0], cmp_symbol);
    return s ? &dd_reflect_files[s->file] : NULL;
}

const struct dd_reflect_file *dd_reflect_find_file(const char *name)
{
    for (size_t i = 0; i < dd_reflect_nfiles; i++)
        if (strcmp(dd_reflect_files[i].name, name) == 0) return &dd_reflect_files[i];
    return NULL;
}

/* Names echoed in an error message are cut and made printable. */
#define ECHO_MAX 200

int dd_reflect_answer(const uint8_t *req, size_t len, uint8_t **out, size_t *outlen)
{
    *out = NULL;
    *outlen = 0;
    if (len > DD_REFLECT_MAX_REQUEST) return DD_ERR_INVALID;
    Grpc__Reflection__V1__ServerReflectionRequest *rq =
        grpc__reflection__v1__server_reflection_request__unpack(NULL, len, req);
    if (!rq) return DD_ERR_INVALID;

    Grpc__Reflection__V1__ServerReflectionResponse resp =
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__INIT;
    Grpc__Reflection__V1__FileDescriptorResponse files =
        GRPC__REFLECTION__V1__FILE_DESCRIPTOR_RESPONSE__INIT;
    Grpc__Reflection__V1__ListServiceResponse list =
        GRPC__REFLECTION__V1__LIST_SERVICE_RESPONSE__INIT;
    Grpc__Reflection__V1__ExtensionNumberResponse ext =
        GRPC__REFLECTION__V1__EXTENSION_NUMBER_RESPONSE__INIT;
    Grpc__Reflection__V1__ErrorResponse error = GRPC__REFLECTION__V1__ERROR_RESPONSE__INIT;
    Grpc__Reflection__V1__ServiceResponse svcs[16];
    Grpc__Reflection__V1__ServiceResponse *svcp[16];
    ProtobufCBinaryData fdp;
    char msg[ECHO_MAX + 64], esc[ECHO_MAX + 8];
    const struct dd_reflect_file *f = NULL;
    const char *what = NULL; /* the name looked up, for the error */

    resp.valid_host = rq->host;
    resp.original_request = rq;
    switch (rq->message_request_case) {
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_LIST_SERVICES: {
        size_t n = dd_reflect_nservices < 16 ? dd_reflect_nservices : 16;
        for (size_t i = 0; i < n; i++) {
            grpc__reflection__v1__service_response__init(&svcs[i]);
            svcs[i].name = (char *)dd_reflect_services[i];
            svcp[i] = &svcs[i];
        }
        list.n_service = n;
        list.service = svcp;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_LIST_SERVICES_RESPONSE;
        resp.list_services_response = &list;
        break;
    }
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_BY_FILENAME:
        what = rq->file_by_filename;
        f = dd_reflect_find_file(what);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_SYMBOL:
        what = rq->file_containing_symbol;
        f = dd_reflect_find_symbol(what);
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_ALL_EXTENSION_NUMBERS_OF_TYPE:
        what = rq->all_extension_numbers_of_type;
        if (dd_reflect_find_symbol(what)) {
            ext.base_type_name = (char *)(what[0] == '.' ? what + 1 : what);
            resp.message_response_case =
                GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ALL_EXTENSION_NUMBERS_RESPONSE;
            resp.all_extension_numbers_response = &ext;
        }
        break;
    case GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION:
        what = rq->file_containing_extension && rq->file_containing_extension->containing_type
                   ? rq->file_containing_extension->containing_type
                   : "";
        break;
    default: break;
    }
    if (f) {
        fdp.data = (uint8_t *)f->bytes;
        fdp.len = f->len;
        files.n_file_descriptor_proto = 1;
        files.file_descriptor_proto = &fdp;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_FILE_DESCRIPTOR_RESPONSE;
        resp.file_descriptor_response = &files;
    }
    if (resp.message_response_case ==
        GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE__NOT_SET) {
        if (!what) {
            error.error_code = GRPC_STATUS_INVALID_ARGUMENT;
            snprintf(msg, sizeof msg, "no request set in ServerReflectionRequest");
        } else {
            error.error_code = GRPC_STATUS_NOT_FOUND;
            dd_sanitize(esc, sizeof esc, what, strlen(what));
            snprintf(
                msg, sizeof msg,
                rq->message_request_case ==
                        GRPC__REFLECTION__V1__SERVER_REFLECTION_REQUEST__MESSAGE_REQUEST_FILE_CONTAINING_EXTENSION
                    ? "no extension of \"%s\" is declared"
                    : "\"%s\" not found",
                esc);
        }
        error.error_message = msg;
        resp.message_response_case =
            GRPC__REFLECTION__V1__SERVER_REFLECTION_RESPONSE__MESSAGE_RESPONSE_ERROR_RESPONSE;
        resp.error_response = &error;
    }
    size_t n = grpc__reflection__v1__server_reflection_response__get_packed_size(&resp);
    uint8_t *buf = malloc(n ? n : 1);
    if (!buf) {
        grpc__reflection__v1__server_reflection_request__free_unpacked(rq, NULL);
        return DD_ERR_NOMEM;
    }
    grpc__reflection__v1__server_reflection_response__pack(&resp, buf);
    grpc__reflection__v1__server_reflection_request__free_unpacked(rq, NULL);
    *out = buf;
    *outlen = n;
    return DD_OK;
}
