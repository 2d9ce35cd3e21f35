"""The app developer guide's Python example (docs/app-developer.md): it uses a BucketAccess's
Secret, given as environment variables (envFrom), to write an object into the bucket and read it
back. boto3 (1.28 or later) reads AWS_ENDPOINT_URL, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY itself; BUCKET_NAME and AWS_S3_ADDRESSING_STYLE are COSI's."""
import os

import boto3
from botocore.config import Config

style = "path" if os.environ.get("AWS_S3_ADDRESSING_STYLE") == "path" else "virtual"
s3 = boto3.client("s3", config=Config(s3={"addressing_style": style},
                                      request_checksum_calculation="when_required",
                                      response_checksum_validation="when_required"))
bucket = os.environ["BUCKET_NAME"]
s3.put_object(Bucket=bucket, Key="hello.txt", Body=b"hello from Python")
body = s3.get_object(Bucket=bucket, Key="hello.txt")["Body"].read().decode()
print(f"s3://{bucket}/hello.txt: {body}")
