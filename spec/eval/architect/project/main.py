import sys

def count(path):
    with open(path) as f:
        return len(f.read().split())

if __name__ == "__main__":
    print(count(sys.argv[1]))
